"""Which service hosts an application's ingress: what ``serve.get_app_handle``
resolves through the controller, in a driver or inside a replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steadyserve.compat.ray_deployment import ingress_of, service_document
from steadyserve.spec import ServiceSpec
from steadyserve.spec.loading import parse_service


def _spec(tmp: Path, dep: str, ingress: bool, prefix: str | None) -> ServiceSpec:
    info: dict[str, Any] = {"name": dep, "class_path": f"m:app.{dep}", "ingress": ingress}
    doc = service_document("math", dep, info, {}, {"workdir": str(tmp)}, {}, [])
    doc["service"]["route_prefix"] = prefix if ingress else None
    return parse_service(doc, base_dir=tmp)


def test_the_marked_ingress_wins_even_without_a_route_prefix(tmp_path: Path) -> None:
    a = _spec(tmp_path, "a", True, None)
    b = _spec(tmp_path, "b", False, None)
    assert a.ray_options["ingress"] is True and "ingress" not in b.ray_options
    assert ingress_of([b, a]) is a


def test_unmarked_services_fall_back_to_the_routed_one(tmp_path: Path) -> None:
    a = _spec(tmp_path, "a", True, "/math").model_copy(update={"ray_options": {}})
    b = _spec(tmp_path, "b", False, None)
    assert ingress_of([b, a]) is a
    assert ingress_of([]) is None
