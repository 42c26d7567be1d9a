"""What user code may ask about where it runs: ``serve.get_replica_context()`` and
``serve.get_multiplexed_model_id()``.

The runner sets the replica's context before ``__init__`` (Ray's code reads it in
constructors) and the model id of each request from its
``serve_multiplexed_model_id`` header (HTTP and handle calls alike) in a
``ContextVar``, so concurrent requests each see their own.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
from dataclasses import dataclass
from typing import Any

MODEL_ID_HEADER = "serve_multiplexed_model_id"


@dataclass(frozen=True)
class DeploymentID:
    name: str
    app_name: str = "default"


@dataclass(frozen=True)
class ReplicaID:
    """Ray's ``ReplicaID``: ``unique_id`` is the replica's number in its service."""

    unique_id: str
    deployment_id: DeploymentID

    def to_full_id_str(self) -> str:
        return f"{self.deployment_id.app_name}#{self.deployment_id.name}#{self.unique_id}"


@dataclass
class ReplicaContext:
    """Ray's ``ReplicaContext``: which replica this is and the user's object in it."""

    replica_id: ReplicaID
    servable_object: Any = None
    service: str = ""

    @property
    def app_name(self) -> str:
        return self.replica_id.deployment_id.app_name

    @property
    def deployment(self) -> str:
        return self.replica_id.deployment_id.name

    @property
    def replica_tag(self) -> str:
        return self.replica_id.unique_id


_replica: ReplicaContext | None = None
_model_id: contextvars.ContextVar[str] = contextvars.ContextVar("steady_model_id", default="")


def set_replica_context(context: ReplicaContext | None) -> None:
    global _replica
    _replica = context


def get_replica_context() -> ReplicaContext:
    """The context of the replica this code runs in; RuntimeError anywhere else."""
    if _replica is None:
        raise RuntimeError(
            "`serve.get_replica_context()` may only be called from within a deployment"
        )
    return _replica


def get_multiplexed_model_id() -> str:
    """The model id of the request being served (``""`` when it named none)."""
    return _model_id.get()


def set_model_id(model_id: str) -> contextvars.Token[str]:
    return _model_id.set(model_id)


def reset_model_id(token: contextvars.Token[str]) -> None:
    _model_id.reset(token)


# The handle calls a request made, so that cancelling the request cancels them
# (replica/app.py CancelOnDisconnect), as Ray Serve cancels a request's children.
_calls: contextvars.ContextVar[set[concurrent.futures.Future[Any]] | None] = contextvars.ContextVar(
    "steady_request_calls", default=None
)


def collect_calls(calls: set[concurrent.futures.Future[Any]]) -> contextvars.Token[Any]:
    """Handle calls made from here on, in this context, are added to ``calls``."""
    return _calls.set(calls)


def stop_collecting(token: contextvars.Token[Any]) -> None:
    _calls.reset(token)


def track_call(future: concurrent.futures.Future[Any]) -> None:
    """A handle call started: the request it was made in may cancel it."""
    calls = _calls.get()
    if calls is not None:
        calls.add(future)
        future.add_done_callback(calls.discard)
