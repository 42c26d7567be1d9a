"""``from ray import serve`` in a driver where Ray is not installed, and a real Ray
never shadowed where it is.

This environment has Ray (the test extra), so "not installed" is made as pip would
leave it: an interpreter without its site folder (``-S``) whose path is a copy of
site-packages less Ray's ``ray/`` package and its dist-info (symlinks), then
SteadyServe's source folder, which holds the ``ray.py`` a wheel installs."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import steadyserve
from tests.helpers.steady import Steady, processes_of_home
from tests.lb._lb_helpers import free_port

SRC = Path(steadyserve.__file__).resolve().parents[1]
SITE = Path(sysconfig.get_paths()["purelib"])


def without_ray(tmp: Path) -> Path:
    """site-packages as pip leaves it with Ray uninstalled (everything else linked)."""
    folder = tmp / "site-without-ray"
    folder.mkdir()
    for entry in SITE.iterdir():
        if entry.name == "ray" or (entry.name.startswith("ray-") and "dist-info" in entry.name):
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def python(code: str, *, path: list[Path], no_site: bool, cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, *(["-S"] if no_site else []), "-c", textwrap.dedent(code)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_real_ray_is_never_shadowed(tmp_path: Path) -> None:
    """Ray's package wins beside ray.py, and ray.py before it on the path loads it."""
    import ray

    real = str(Path(ray.__file__).resolve())
    assert real.startswith(str(SITE.resolve())), real
    show = "import ray, os; print(os.path.realpath(ray.__file__), ray.__version__)"
    for path in ([], [SRC]):  # as installed; SteadyServe's folder first on the path
        assert python(show, path=path, no_site=False, cwd=tmp_path).split() == [
            real,
            ray.__version__,
        ]


def test_the_stand_in_is_serves_api_and_refuses_the_rest(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("from ray import serve\n\n@serve.deployment\ndef f(): ...\n")
    out = python(
        """
        import app  # only the imported module says `from ray import serve`
        import ray
        import steadyserve.serve as steady
        from ray import serve
        from ray.serve.handle import DeploymentHandle
        print(ray.__file__)
        assert serve.run is steady.run and type(app.f) is steady.Deployment
        assert DeploymentHandle is steady.DeploymentHandle
        ray.init(address="auto", ignore_reinit_error=True)
        assert ray.is_initialized()
        try:
            ray.get(None)
        except ValueError as exc:
            print(exc)
        try:
            import ray.data
        except ModuleNotFoundError as exc:
            print(exc)
        """,
        path=[without_ray(tmp_path), tmp_path, SRC],
        no_site=True,
        cwd=tmp_path,
    )
    lines = out.splitlines()
    assert lines[0] == str(SRC / "ray.py")
    assert lines[1] == (
        "Invalid type of object refs, <class 'NoneType'>, is given. "
        "'object_refs' must either be an ObjectRef or a list of ObjectRefs. "
    )
    assert lines[2].startswith("ray.data is not provided here")


DRIVER = """
from ray import serve

from hello import Hello

serve.start(http_options={"port": int(__import__("sys").argv[1])})
handle = serve.run(Hello.bind(), name="hello", route_prefix="/hello")
print(handle.remote().result())
"""


def test_python_driver_py_runs_with_from_ray_import_serve(tmp_path: Path) -> None:
    """A driver whose module says ``from ray import serve``, run as ``python driver.py``
    where Ray is not installed: its application serves through a real controller."""
    (tmp_path / "hello.py").write_text(
        "from ray import serve\n\n\n@serve.deployment\nclass Hello:\n"
        "    def __call__(self, request=None):\n        return 'hello'\n"
    )
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    home = tmp_path / "home"
    port = free_port()
    path = [without_ray(tmp_path), tmp_path, SRC]
    try:
        out = _drive(tmp_path, path, home, port)
        assert out.strip() == "hello"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/hello")
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"hello")
        conn.close()
    finally:
        steady = Steady(home)
        steady.run("down", "--all", check=False, timeout=120)
        steady.run("controller", "stop", check=False, timeout=60)
    assert not processes_of_home(home)


def _drive(tmp: Path, path: list[Path], home: Path, port: int) -> str:
    done = subprocess.run(
        [sys.executable, "-S", "driver.py", str(port)],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(map(str, path)),
            "STEADY_HOME": str(home),
            # Replicas run on this environment's interpreter, where Ray is installed.
            "STEADY_RAY_SERVE": "steadyserve",
        },
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout

