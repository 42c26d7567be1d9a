"""Per-version environments: the content key (pure), and building, reusing and
pruning real virtualenvs in temporary folders (packages from local wheels)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.helpers.wheels import make_wheel, offline_env

from steadyserve.envs import build as eb
from steadyserve.envs import plan as envs
from steadyserve.envs import seal
from steadyserve.home.paths import Home
from steadyserve.oneline import last_lines
from steadyserve.spec import ServiceSpec, SpecError
from steadyserve.spec.changes import classify
from steadyserve.spec.loading import parse_service

PY = "cpython-311 3.11.7"


# ------------------------------------------------------------------- the key


def key(setup: str | None = "pip install -r requirements.txt", pip: envs.PipSpec = None,
        files: dict[str, bytes] | None = None, python: str = PY) -> str:  # fmt: skip
    return envs.environment_key(setup, pip, files or {"requirements.txt": b"a==1\n"}, python)


def test_key_changes_with_what_decides_the_packages() -> None:
    base = key()
    assert key(setup="pip install -r requirements.txt && echo x") != base
    assert key(pip=["pinme==1.0"]) != key(pip=["pinme==2.0"])
    assert key(pip=["a", "b"]) != key(pip=["b", "a"])  # install order can matter
    assert key(pip="requirements.txt") != key(pip=["requirements.txt"])
    assert key(files={"requirements.txt": b"a==2\n"}) != base
    assert key(files={"requirements.txt": b"a==1\n", "uv.lock": b"x"}) != base
    assert key(python="cpython-312 3.12.1") != base


def test_key_does_not_change_with_what_does_not() -> None:
    files = {"requirements.txt": b"a==1\n", "pyproject.toml": b"[project]\n"}
    reordered = dict(reversed(list(files.items())))
    assert key(files=files) == key(files=reordered)
    assert key() == key()


@given(
    st.text(max_size=30),
    st.lists(st.text(min_size=1, max_size=10), max_size=4),
    st.dictionaries(st.text(min_size=1, max_size=10), st.binary(max_size=20), max_size=3),
)
def test_key_is_a_function_of_its_inputs_and_tells_file_bytes_apart(
    setup: str, pip: list[str], files: dict[str, bytes]
) -> None:
    assert key(setup, pip, files) == key(setup, pip, dict(files))
    if files:
        name = sorted(files)[0]
        changed = {**files, name: files[name] + b"!"}
        assert key(setup, pip, changed) != key(setup, pip, files)


def test_key_files_are_the_dependency_files_at_the_top_and_the_pip_file(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("a\n")
    (tmp_path / "requirements-dev.txt").write_text("b\n")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "app.py").write_text("print(1)\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "requirements.txt").write_text("c\n")
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / "reqs.in").write_text("d\n")
    found = eb.key_files(tmp_path, "deps/reqs.in")
    assert found == {
        "pyproject.toml": b"[project]\n",
        "requirements-dev.txt": b"b\n",
        "requirements.txt": b"a\n",
        "deps/reqs.in": b"d\n",
    }
    before = eb.key_for(tmp_path, "make", None)
    (tmp_path / "app.py").write_text("print(2)\n")  # code alone: same environment
    assert eb.key_for(tmp_path, "make", None) == before
    (tmp_path / "requirements.txt").write_text("a==2\n")
    assert eb.key_for(tmp_path, "make", None) != before
    with pytest.raises(eb.BuildError, match=r"pip: no requirements file missing\.txt"):
        eb.key_files(tmp_path, "missing.txt")


def test_which_versions_need_an_environment() -> None:
    assert not envs.needs_environment(None, None)
    assert not envs.needs_environment("  ", [])
    assert envs.needs_environment("make", None)
    assert envs.needs_environment(None, ["x"])
    assert envs.needs_environment(None, "requirements.txt")


def test_requirements_path_stays_inside_the_workdir() -> None:
    assert envs.requirements_path("deps/r.txt") == "deps/r.txt"
    assert envs.requirements_path("/etc/passwd") is None
    assert envs.requirements_path("../r.txt") is None
    assert envs.requirements_path(" ") is None


def test_build_plan_uses_uv_when_there_is_one() -> None:
    plan = envs.build_plan(
        uv="/bin/uv", python="/py", target="/e/venv", pip=["a==1"], lends_pip=True
    )
    assert plan.tool == "uv"
    assert plan.create == ["/bin/uv", "venv", "--quiet", "--python", "/py", "/e/venv"]
    assert plan.install == ["/bin/uv", "pip", "install", "--python", "/e/venv/bin/python", "a==1"]
    plan = envs.build_plan(uv=None, python="/py", target="/e/venv", pip="r.txt", lends_pip=True)
    assert plan.tool == "pip" and plan.create == ["/py", "-m", "venv", "--without-pip", "/e/venv"]
    assert plan.install is not None and plan.install[-2:] == ["-r", "r.txt"]
    plan = envs.build_plan(uv=None, python="/py", target="/e", pip=None, lends_pip=False)
    assert plan.create == ["/py", "-m", "venv", "/e"] and plan.install is None


def test_closure_follows_requirements_without_extras() -> None:
    """SteadyServe's closure: its dependencies and theirs, not what only an extra needs."""
    lent = {seal.canonical(d.metadata["Name"] or "") for d in seal.closure(seal.controller_lookup)}
    assert {"steadyserve", "starlette", "uvicorn", "pydantic", "pydantic-core", "anyio"} <= lent
    assert "pytest" not in lent and "ray" not in lent  # the test venv has both
    assert seal.canonical("PyYAML") == "pyyaml" and seal.canonical("typing_extensions") == (
        "typing-extensions"
    )
    assert seal.conflict_line([]) is None
    assert seal.conflict_line(["a", "b"]) == ("the version's packages win over SteadyServe's: a; b")


def test_unused_and_tail() -> None:
    assert envs.unused(["a", "b", "c"], {"b"}) == ["a", "c"]
    assert last_lines("1\n\n2\n3\n4\n") == "2 | 3 | 4"
    assert last_lines("") == "no output"
    assert len(last_lines("x" * 1000)) == 400


# ------------------------------------------------------- real builds on disk

TOOLS = ["pip", *(["uv"] if shutil.which("uv") else [])]


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder, "pinme", "1.0")
    make_wheel(folder, "pinme", "2.0")
    return folder


def build_env(wheels: Path, tool: str) -> dict[str, str]:
    env = dict(os.environ, **offline_env(wheels))
    if tool == "pip":  # hide every uv on PATH: the venv + pip path (builds use absolute paths)
        folders = env["PATH"].split(os.pathsep)
        env["PATH"] = os.pathsep.join(p for p in folders if not shutil.which("uv", path=p))
    return env


def run_in(environment: eb.Environment, code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [environment.python, "-c", code],
        env=environment.activate(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.parametrize("tool", TOOLS)
def test_build_then_reuse_and_setup_pip_stays_inside(
    tmp_path: Path, wheels: Path, tool: str
) -> None:
    home = Home(tmp_path / "home")
    workdir = tmp_path / "wd"
    workdir.mkdir()
    env = build_env(wheels, tool)
    setup = "pip install -q pinme==2.0 && echo setup-ran > marker.txt"

    environment, built = asyncio.run(eb.ensure(home, workdir, setup, ["pinme==1.0"], env))
    assert built
    assert f"with {tool}" in environment.log.read_text()
    assert (workdir / "marker.txt").exists()  # setup ran in the version's workdir
    # setup's pip install went into the venv (after pip:), and steadyserve is importable.
    code = "import pinme, steadyserve, sys; print(pinme.__version__, sys.prefix)"
    version, prefix = run_in(environment, code, env).split()
    assert version == "2.0" and Path(prefix).resolve() == environment.venv.resolve()
    # Nothing leaked into the interpreter the tests (and a controller) run in.
    leaked = subprocess.run([sys.executable, "-c", "import pinme"], capture_output=True)
    assert leaked.returncode != 0

    again, built_again = asyncio.run(eb.ensure(home, workdir, setup, ["pinme==1.0"], env))
    assert not built_again and again == environment
    assert eb.keys_on_disk(home) == [environment.key]


@pytest.mark.parametrize("tool", TOOLS)
def test_environment_is_sealed_from_the_controllers_packages(
    tmp_path: Path, wheels: Path, tool: str
) -> None:
    """The SkyPilot ray_serve shape: ``setup: pip install X`` where the controller
    has X too. The venv's pip must not see the controller's X ("already
    satisfied") and the venv must not import packages only the controller has."""
    make_wheel(wheels, "iniconfig", "99.0")  # the controller has iniconfig (pytest needs it)
    home = Home(tmp_path / "home")
    (tmp_path / "wd").mkdir()
    env = build_env(wheels, tool)
    setup = "pip install iniconfig"
    environment, _ = asyncio.run(eb.ensure(home, tmp_path / "wd", setup, None, env))
    # The controller's Ray package is not there: ``ray`` is SteadyServe's one-file
    # stand-in for Ray Serve scripts (src/ray.py), never a package.
    code = (
        "import importlib.util as u, iniconfig, steadyserve.replica.server;"
        "r = u.find_spec('ray');"
        "print(iniconfig.__version__, u.find_spec('pytest') is None,"
        " r is None or (r.submodule_search_locations is None"
        " and str(r.origin).endswith('/ray.py')))"
    )
    assert run_in(environment, code, env) == "99.0 True True"
    assert "conflict" not in environment.log.read_text()


def test_the_versions_pins_win_and_a_conflict_is_one_line(tmp_path: Path, wheels: Path) -> None:
    make_wheel(wheels, "starlette", "0.1")
    home = Home(tmp_path / "home")
    (tmp_path / "wd").mkdir()
    env = build_env(wheels, TOOLS[-1])
    environment, _ = asyncio.run(eb.ensure(home, tmp_path / "wd", None, ["starlette==0.1"], env))
    assert run_in(environment, "import starlette; print(starlette.__version__)", env) == "0.1"
    log = environment.log.read_text().splitlines()
    lines = [line for line in log if line.startswith("--- conflict")]
    assert lines == [
        "--- conflict: the version's packages win over SteadyServe's: steadyserve needs"
        " starlette>=0.37, the environment has starlette 0.1"
    ]
    # The controller's own copy is untouched (the venv's was a hard link to it).
    assert seal.controller_lookup("starlette") is not None
    out = subprocess.run(
        [sys.executable, "-c", "import starlette; print(starlette.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() != "0.1"


def test_concurrent_builds_of_one_key_build_once(tmp_path: Path, wheels: Path) -> None:
    home = Home(tmp_path / "home")
    (tmp_path / "wd").mkdir()
    env = build_env(wheels, TOOLS[-1])

    async def both() -> list[tuple[eb.Environment, bool]]:
        return list(
            await asyncio.gather(
                eb.ensure(home, tmp_path / "wd", None, ["pinme==1.0"], env),
                eb.ensure(home, tmp_path / "wd", None, ["pinme==1.0"], env),
            )
        )

    results = asyncio.run(both())
    assert sorted(built for _, built in results) == [False, True]
    assert results[0][0] == results[1][0]
    assert len(built_things(home)) == 2  # the link and its folder


def built_things(home: Home) -> list[str]:
    """What builds left in envs/ (the per-key lock files aside)."""
    return [n for n in os.listdir(eb.envs_root(home)) if not n.endswith(".lock")]


_ENSURE_IN_A_PROCESS = """
import asyncio, sys
from pathlib import Path
from steadyserve.envs import build as eb
from steadyserve.home.paths import Home
env, built = asyncio.run(eb.ensure(Home(Path(sys.argv[1])), Path(sys.argv[2]), sys.argv[3], None,
                                   dict(__import__("os").environ)))
print(env.path.resolve(), built)
"""


def test_two_processes_building_one_key_at_once_build_it_once(tmp_path: Path, wheels: Path) -> None:
    """The controller and a CLI (a Ray Serve import) may need one environment at the
    same moment: the key's file lock makes one build it and the other reuse it."""
    home = tmp_path / "home"
    (tmp_path / "wd").mkdir()
    runs = tmp_path / "setup-runs"
    setup = f"echo ran >> {runs}; sleep 1"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ENSURE_IN_A_PROCESS, str(home), str(tmp_path / "wd"), setup],
            env=build_env(wheels, TOOLS[-1]),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert runs.read_text().splitlines() == ["ran"]  # built once
    assert sorted(built for _, built in outputs) == ["False", "True"]
    assert outputs[0][0] == outputs[1][0]
    assert len(built_things(Home(home))) == 2


def test_a_failed_build_leaves_nothing_and_says_why(tmp_path: Path, wheels: Path) -> None:
    home = Home(tmp_path / "home")
    (tmp_path / "wd").mkdir()
    env = build_env(wheels, TOOLS[-1])
    failure = tmp_path / "setup.log"
    setup = "echo first; echo 'the real cause' >&2; exit 3"
    with pytest.raises(eb.BuildError) as caught:
        asyncio.run(eb.ensure(home, tmp_path / "wd", setup, None, env, failure_log=failure))
    message = str(caught.value)
    assert message.startswith("setup exited with code 3: ")
    assert "the real cause" in message and "\n" not in message
    assert "the real cause" in failure.read_text()
    assert os.listdir(eb.envs_root(home)) == []

    with pytest.raises(eb.BuildError, match="pip exited with code"):
        asyncio.run(eb.ensure(home, tmp_path / "wd", None, ["pinme==9.9"], env))
    assert os.listdir(eb.envs_root(home)) == []


def test_prune_keeps_used_deletes_unused_and_dead_builds(tmp_path: Path, wheels: Path) -> None:
    home = Home(tmp_path / "home")
    (tmp_path / "wd").mkdir()
    env = build_env(wheels, TOOLS[-1])
    one, _ = asyncio.run(eb.ensure(home, tmp_path / "wd", None, ["pinme==1.0"], env))
    two, _ = asyncio.run(eb.ensure(home, tmp_path / "wd", None, ["pinme==2.0"], env))
    root = eb.envs_root(home)
    dead = root / ".deadbeef-dead"
    dead.mkdir()
    (dead / ".building").touch()
    os.utime(dead, (0, time.time() - 2 * eb._ORPHAN_AGE_S))
    starting = root / ".feed-starting"  # created, its lock not yet taken
    starting.mkdir()
    (starting / ".building").touch()
    live = root / ".cafe-live"
    live.mkdir()
    fd = os.open(live / ".building", os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        kept = [(tmp_path / "wd", None, ["pinme==2.0"])]
        assert eb.prune_unused(home, kept) == [one.key]  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert eb.existing(home, one.key) is None
    assert eb.existing(home, two.key) == two
    assert not dead.exists() and live.exists() and starting.exists()
    expected = [".cafe-live", ".feed-starting", two.key, os.readlink(two.path)]
    assert sorted(built_things(home)) == sorted(expected)
    # A key's lock file goes with its environment (and only then).
    assert sorted(n for n in os.listdir(root) if n.endswith(".lock")) == [f".{two.key}.lock"]


# ------------------------------------------------------------ the pip: field


def test_pip_field_takes_a_list_or_a_requirements_file_in_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / "reqs.txt").write_text("pinme==1.0\n")
    spec = parse_service({"run": "x", "pip": [" pinme==1.0 "]}, base_dir=tmp_path, name="a")
    assert spec.pip == ["pinme==1.0"]
    spec = parse_service(
        {"run": "x", "pip": "deps/reqs.txt", "workdir": "."}, base_dir=tmp_path, name="a"
    )
    assert spec.pip == "deps/reqs.txt"
    assert ServiceSpec.from_json(spec.spec_json()).pip == "deps/reqs.txt"


@pytest.mark.parametrize(
    ("pip", "workdir", "message"),
    [
        ("missing.txt", ".", "pip: no requirements file missing.txt in the workdir"),
        ("deps/reqs.txt", None, "pip: the requirements file deps/reqs.txt needs a workdir"),
        ("../reqs.txt", ".", "pip: a requirements file must be a relative path inside"),
        ("/etc/reqs.txt", ".", "pip: a requirements file must be a relative path inside"),
        ([1], None, "pip: each requirement must be a non-empty string"),
        ([""], None, "pip: each requirement must be a non-empty string"),
        ({"packages": ["a"]}, None, "pip: must be a list of requirements or a requirements"),
        ("", None, "pip: must be a list of requirements or a requirements"),
    ],
)
def test_bad_pip_is_one_line_naming_the_field(
    tmp_path: Path, pip: object, workdir: str | None, message: str
) -> None:
    data: dict[str, object] = {"run": "x", "pip": pip}
    if workdir is not None:
        data["workdir"] = workdir
    with pytest.raises(SpecError) as caught:
        parse_service(data, base_dir=tmp_path, name="a")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_changing_pip_is_a_restart() -> None:
    old = ServiceSpec.model_validate({"run": "x", "pip": ["pinme==1.0"]})
    new = ServiceSpec.model_validate({"run": "x", "pip": ["pinme==2.0"]})
    changes = classify(old, new, old_workdir_hash=None, new_workdir_hash=None)
    assert [(c.path, c.kind) for c in changes.changes] == [("pip", "restart")]
    assert "new environment" in changes.changes[0].why


def test_what_setup_adds_to_the_workdir_reaches_every_version_sharing_it(
    tmp_path: Path, wheels: Path
) -> None:
    """setup runs once per environment; a later version with other code but the
    same key still gets the files setup made (as when setup ran per version)."""
    home = Home(tmp_path / "home")
    env = build_env(wheels, TOOLS[-1])
    setup = "mkdir -p models && echo weights > models/model.bin && python -c 'import app'"
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for folder, code in ((v1, "x = 1\n"), (v2, "x = 2\n")):
        folder.mkdir()
        (folder / "app.py").write_text(code)
    environment, built = asyncio.run(eb.ensure(home, v1, setup, None, env))
    assert built and (v1 / "models" / "model.bin").read_text() == "weights\n"
    again, built = asyncio.run(eb.ensure(home, v2, setup, None, env))
    assert again == environment and not built
    assert (v2 / "models" / "model.bin").read_text() == "weights\n"
    assert (v2 / "app.py").read_text() == "x = 2\n"  # the version's own code stays
    assert not (v2 / "__pycache__").exists()  # byte-code caches are not outputs
