"""docs/design.md lists every module with its job, and no module grows past 500
lines: the layout stays readable to the next person (docs/design.md, "Every module")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "steadyserve"
MAX_LINES = 500


def _modules() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def _listed() -> dict[str, str]:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("### Every module") :]
    section = section[: section.index("\n\n**")] if "\n\n**" in section else section
    return dict(re.findall(r"^\| `([\w/]+\.py)` \| (.*?) \|$", section, flags=re.M))


def test_every_module_is_in_the_module_table_with_its_job() -> None:
    listed = _listed()
    missing = [m for m in _modules() if m not in listed]
    assert not missing, f"docs/design.md 'Every module' does not list: {missing}"
    assert all(len(job) > 10 for job in listed.values()), "a module's job is left blank"


def test_the_module_table_names_no_module_that_is_gone() -> None:
    gone = sorted(set(_listed()) - set(_modules()))
    assert not gone, f"docs/design.md 'Every module' lists modules that do not exist: {gone}"


def test_no_module_is_over_500_lines() -> None:
    sizes = {m: len((PACKAGE / m).read_text().splitlines()) for m in _modules()}
    big = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them along their concerns): {big}"
