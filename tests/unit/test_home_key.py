"""The home's key: processes that make it at once agree on one, privately."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from steadyserve.home import api_token
from steadyserve.wire import replica_contract as contract

DERIVE = (
    "import sys; from pathlib import Path; from steadyserve.wire import replica_contract as c; "
    "print(c.api_secret(Path(sys.argv[1])))"
)


def test_processes_making_the_key_at_once_agree_on_one(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", DERIVE, str(tmp_path)], stdout=subprocess.PIPE)
        for _ in range(6)
    ]
    secrets = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(secrets) == 1 and all(p.returncode == 0 for p in procs)
    assert stat.S_IMODE((tmp_path / "control.key").stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["control.key"]  # no drafts left


def test_a_key_that_is_not_hex_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "control.key").write_text("")  # e.g. a crash mid-write
    secret = contract.api_secret(tmp_path)
    assert len(bytes.fromhex((tmp_path / "control.key").read_text())) == 32
    assert len(secret) == 64


def test_steady_token_overrides_the_homes_secret(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("STEADY_TOKEN", raising=False)
    assert api_token.required(tmp_path) == contract.api_secret(tmp_path)
    assert api_token.required(tmp_path) not in (
        contract.routes_token(tmp_path),
        contract.graph_secret(tmp_path),
    )
    monkeypatch.setenv("STEADY_TOKEN", "s3cret")
    assert api_token.header(tmp_path) == {"Authorization": "Bearer s3cret"}


def test_a_user_who_cannot_read_the_home_sends_nothing(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("STEADY_TOKEN", raising=False)
    missing = tmp_path / "no-such-home"  # the key cannot be read or made there
    assert api_token.for_client(missing) is None
    assert api_token.header(missing) == {}
