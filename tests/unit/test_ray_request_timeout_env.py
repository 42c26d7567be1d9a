"""Ray's ``RAY_SERVE_REQUEST_PROCESSING_TIMEOUT_S``: the proxy's request timeout when
``http_options.request_timeout_s`` sets none (Ray's constants: that variable, else
``SERVE_REQUEST_PROCESSING_TIMEOUT_S``; ``0`` or unset: none). The driver's
``serve.start``/``serve.run`` and ``steady deploy`` of a Ray Serve config read it;
a value that is not seconds is one line naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from steadyserve.compat.ray_deployment import request_timeout_from_env
from steadyserve.compat.ray_serve import translate
from steadyserve.serve import api
from steadyserve.spec import SpecError

NEW, OLD = "RAY_SERVE_REQUEST_PROCESSING_TIMEOUT_S", "SERVE_REQUEST_PROCESSING_TIMEOUT_S"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (NEW, OLD):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(api, "_request_timeout_s", None)
    monkeypatch.setattr(api, "_http_port", None)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({NEW: "5"}, 5.0),
        ({NEW: "0.1"}, 0.1),
        ({NEW: "0"}, None),
        ({OLD: "2"}, 2.0),
        ({NEW: "0", OLD: "2"}, 2.0),  # Ray's ``or``: a 0 falls through to the older name
        ({NEW: "3", OLD: "2"}, 3.0),
    ],
)
def test_the_variable_read_as_ray_reads_it(env: dict[str, str], expected: float | None) -> None:
    assert request_timeout_from_env(env) == expected


@pytest.mark.parametrize("raw", ["soon", "", "-1", "nan", "inf"])
def test_a_value_that_is_not_seconds_is_one_line_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=rf"^{NEW}: must be a number of seconds") as caught:
        request_timeout_from_env({NEW: raw})
    assert "\n" not in str(caught.value)


def test_serve_run_asks_the_gateway_for_the_variables_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert api.gateway_options()["request_timeout_s"] is None  # unset: the gateway's kept
    monkeypatch.setenv(NEW, "0.5")
    assert api.gateway_options()["request_timeout_s"] == 0.5


def test_http_options_request_timeout_s_wins_over_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NEW, "0.5")
    assert api.gateway_options(timeout=2.0)["request_timeout_s"] == 2.0
    monkeypatch.setattr(api, "_request_timeout_s", 3.0)  # serve.start's
    assert api.gateway_options()["request_timeout_s"] == 3.0
    # Ray's ``request_timeout_s or env``: an http_options 0 takes the variable's.
    assert api.gateway_options(timeout=0.0)["request_timeout_s"] == 0.5
    monkeypatch.delenv(NEW)
    assert api.gateway_options(timeout=0.0)["request_timeout_s"] == 0.0  # clears it


def test_serve_run_refuses_a_bad_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NEW, "five")
    with pytest.raises(ValueError, match=rf"{NEW}: must be a number of seconds.*'five'"):
        api.gateway_options()


CONFIG = {"applications": [{"name": "app", "route_prefix": "/", "import_path": "m:app"}]}


def _describe(*_: object) -> None:
    return None  # no graph to look into: served as one deployment


def test_steady_deploy_of_a_ray_config_takes_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert translate(CONFIG, tmp_path, _describe).gateway_timeout is None
    monkeypatch.setenv(NEW, "5")
    assert translate(CONFIG, tmp_path, _describe).gateway_timeout == 5.0
    timed = {**CONFIG, "http_options": {"request_timeout_s": 1}}
    assert translate(timed, tmp_path, _describe).gateway_timeout == 1.0  # the config's wins
    monkeypatch.setenv(NEW, "soon")
    with pytest.raises(SpecError, match=rf"^{NEW}: must be a number of seconds"):
        translate(CONFIG, tmp_path, _describe)
