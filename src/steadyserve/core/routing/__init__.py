"""Which replica gets a request: the routing policies shared by the load balancer
and the handles (:mod:`.policies`), pure functions of the candidates' state."""
