"""Every routing policy by its ``load_balancing_policy`` name, in one registry that
the spec (which names it accepts), the load balancer and handles (which policy they
build) all read. A new policy is one module with a :class:`Policy` and one line here.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from steadyserve.core.routing.affinity import SessionAffinity
from steadyserve.core.routing.instance_aware import InstanceAwareLeastLoad
from steadyserve.core.routing.options import DEFAULT_OPTIONS, PolicyOptions
from steadyserve.core.routing.policies import LeastLoad, Policy, PowerOfTwo, RoundRobin
from steadyserve.core.routing.prefix import PrefixAffinity

PolicyFactory = Callable[[random.Random | None, PolicyOptions], Policy]
"""Builds one policy for one route table: a seeded generator (or None) and the
table's policy options."""

POLICIES: dict[str, PolicyFactory] = {}
"""Every ``load_balancing_policy`` name, in the order the spec lists them."""


def register(name: str, factory: PolicyFactory) -> None:
    """Make ``name`` a policy the spec accepts and the load balancer builds."""
    POLICIES[name] = factory


def make_policy(
    name: str, rng: random.Random | None = None, options: PolicyOptions = DEFAULT_OPTIONS
) -> Policy:
    """Build the policy called ``name``; ValueError names the valid choices."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(
            f"unknown load balancing policy {name!r}; expected one of {sorted(POLICIES)}"
        )
    return factory(rng, options)


register("least_load", lambda rng, options: LeastLoad())
register("round_robin", lambda rng, options: RoundRobin())
register("power_of_two", lambda rng, options: PowerOfTwo(rng))
register("instance_aware_least_load", lambda rng, options: InstanceAwareLeastLoad())
register("prefix_affinity", lambda rng, options: PrefixAffinity(options))
register("session_affinity", lambda rng, options: SessionAffinity(options))
