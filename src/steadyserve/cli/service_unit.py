"""The systemd unit that runs a home's controller as a system service.

A unit, not a daemon of our own: systemd (or any supervisor running its
``ExecStart``) restarts the controller when it dies and starts it at boot, and the
controller's start brings every service back to its spec. The unit names the user
and the home and holds no secret: the API's secret is derived from the home
(home/api_token.py), so a unit file readable by anyone gives nothing away.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

UNIT_NAME = "steady-controller.service"
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _quoted(word: str) -> str:
    """One word of a unit's command line or Environment=, quoted when it needs it."""
    if _PLAIN.match(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_start(python: str | None = None) -> list[str]:
    """The controller in the foreground, from this very install (the venv's python,
    so the unit works without the venv on PATH)."""
    return [python or sys.executable, "-m", "steadyserve.cli", "controller", "run"]


def unit_text(user: str, home: Path, python: str | None = None) -> str:
    """The unit file: ``user`` runs the controller of ``home``; Restart=always."""
    command = " ".join(_quoted(word) for word in exec_start(python))
    return f"""\
# SteadyServe: the controller of STEADY_HOME={home}, as a system service.
# Install: steady controller install-unit --output /etc/systemd/system/{UNIT_NAME}
#          systemctl daemon-reload && systemctl enable --now {UNIT_NAME}
[Unit]
Description=SteadyServe controller ({home})
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User={user}
Environment={_quoted(f"STEADY_HOME={home}")}
ExecStart={command}
Restart=always
RestartSec=2
# systemctl stop sends SIGTERM to the controller alone: replicas and load balancers
# keep serving, and the next start adopts them.
KillMode=process
TimeoutStopSec=30

[Install]
WantedBy=multi-user.target
"""
