"""The hostile-client suite reuses the load balancer test helpers of tests/lb."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lb"))
