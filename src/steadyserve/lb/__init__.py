"""SteadyServe's load balancer: one process per service, the product's hot path.

Run it as ``python -m steadyserve.lb --service NAME --port PORT --home PATH``.

- ``downstream``: a client's connection: parse requests (httptools), answer them
  in order; ``request_head`` judges each head (pure), ``client_guards``,
  ``target`` and ``declined_upgrade`` check what arrives.
- ``proxy`` and ``exchange``: one request's way to a replica and back;
  ``upstream``: a pooled keep-alive connection to one replica, its responses
  framed by ``framing``'s modes.
- ``balancer``: per-replica counts, pools per version, ejection; the choice itself
  is the policy's (core/routing); ``shared_load`` shares counts between workers.
- ``websocket``, ``preview``, ``zero``: tunnels, the blue-green preview port, and
  holding requests while a service is at zero.
- ``route_client``: the route-table long-poll and the load report (the formats
  are wire/routes.py and wire/load_report.py).
- ``metrics``, ``observe``, ``access_log``: what was served, for the controller,
  Prometheus and people.
- ``server``, ``workers``, ``__main__``: wiring, SO_REUSEPORT workers, signals and
  graceful drain; ``gateway`` and ``gateway_server``: the Ray Serve gateway port.
"""
