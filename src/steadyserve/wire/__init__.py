"""The formats between SteadyServe's own processes, typed once and imported by both sides.

- :mod:`.routes`: the route table the controller publishes and load balancers,
  the gateway and handles read.
- :mod:`.load_report`: what a load balancer posts back: in-flight and request
  counts per replica, and its traffic counters.
- :mod:`.counts`: those counters (latency buckets, labels) and how reports add up.
- :mod:`.exposition`: the counters in Prometheus' text format.
- :mod:`.lb_process`: what the controller hands a load-balancer process it starts.
- :mod:`.replica_contract`: what the controller and a replica process agree on
  (environment, control port, markers).
- :mod:`.netns`: how a process reaches a replica in a namespace of its own.

(``serve/wire.py`` is another format: the body of a handle call between replicas.)
"""
