"""The tuning of the request-aware policies, as one value (``service.load_balancer``).

A plain frozen value with the documented defaults, so the policies (pure, in this
package) and the route table (wire/routes.py, which writes and reads it as JSON)
share one definition; docs/load-balancer.md explains each default.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BLOCK_BYTES = 256
"""About 64 tokens of English text: fine enough that a shared system prompt
matches to within a block, coarse enough that a 4 KB body is 16 hashes."""
DEFAULT_MAX_ENTRIES = 8192
"""Block hashes remembered per replica: 8192 x 256 bytes is ~2 MiB of prompt
text (~500k tokens), the order of a large GPU's KV cache; ~0.6 MiB of index."""
DEFAULT_IMBALANCE = 4.0
"""How many more requests the best-matching replica may have than the least
loaded one before the request goes to the least loaded instead."""
DEFAULT_EPSILON = 0.25


@dataclass(frozen=True)
class ReplicaMetrics:
    """``service.load_balancer.replica_metrics``: a scrape of each replica's own
    Prometheus endpoint, whose ``gauge`` replaces the LB's in-flight count."""

    path: str = "/metrics"
    gauge: str = "vllm:num_requests_waiting"
    interval_s: float = 1.0
    timeout_s: float = 0.5
    max_age_s: float = 5.0


@dataclass(frozen=True)
class PolicyOptions:
    """What ``prefix_affinity`` and ``session_affinity`` are tuned by."""

    block_bytes: int = DEFAULT_BLOCK_BYTES
    max_entries_per_replica: int = DEFAULT_MAX_ENTRIES
    imbalance_threshold: float = DEFAULT_IMBALANCE
    affinity_key: str | None = None
    """``header:NAME``, ``cookie:NAME`` or ``json:/pointer`` (session_affinity)."""
    affinity_epsilon: float = DEFAULT_EPSILON
    replica_metrics: ReplicaMetrics | None = None


DEFAULT_OPTIONS = PolicyOptions()
