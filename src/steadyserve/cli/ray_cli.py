"""``steady ray``: Ray Serve's ``serve`` verbs (run, deploy, status, shutdown, build,
config) with Ray's arguments, so ``serve X ...`` runs as ``steady ray X ...`` and no
``serve`` script is installed over Ray's (docs/ray-serve.md has the mapping).

Follows Ray's ``python/ray/serve/scripts.py`` as the reference index holds it
(Ray 2.x; the stored copy carries no commit id: the newest one with a commit,
ray-project/ray@a1cb95b831ca85e018bc25ada259ccfa3a0e279d, predates ARGUMENTS and
``--reload``), plus ``--route-prefix`` and ``--name`` of ``serve run`` as
docs.ray.io/en/master/serve/api/cli.html lists them.

Each verb stands on what exists: ``run`` of an import path writes the one-application
config Ray's ``serve run`` would deploy into the home and hands it to ``steady deploy``
(a config file goes there as it is); ``deploy`` is ``steady deploy``; ``status`` is
``steady status --format ray``; ``shutdown`` is ``serve.shutdown()``; ``build``
describes the graph in a subprocess (compat/ray_graph.py: user code is never
imported here); ``config`` reads back the config file each application was deployed
from. A Ray option with no meaning here is accepted and named on stderr.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click
import yaml

from steadyserve.cli import ray_status
from steadyserve.cli.common import _confirm, _echo_json, _home, json_option, reports_errors
from steadyserve.client.connection import Client, CommandError

DEFAULT_APP_NAME = "default"  # Ray's SERVE_DEFAULT_APP_NAME
RUN_WAIT_S = 900.0
APP_DIR_HELP = (
    "Local directory to look for the IMPORT_PATH (will be inserted into PYTHONPATH)."
    " Defaults to '.'."
)


def not_applicable(option: str, why: str) -> None:
    """A Ray option accepted here that changes nothing: said once, on stderr."""
    click.echo(f"note: {option}: does not apply here ({why})", err=True)


address_option = click.option(
    "--address",
    "-a",
    default=None,
    help="Accepted (Ray's cluster address); the controller of STEADY_HOME is used.",
)


def _address(address: str | None) -> None:
    if address is not None:
        not_applicable("--address", "steady talks to the controller of STEADY_HOME")


def app_args(arguments: tuple[str, ...]) -> dict[str, str]:
    """Ray's ``key=val`` application arguments (scripts.py's convert_args_to_dict)."""
    out: dict[str, str] = {}
    for arg in arguments:
        key, sep, value = arg.partition("=")
        if not sep or not key or "=" in value:
            raise CommandError(
                f"Invalid application argument '{arg}', must be of the form '<key>=<val>'.", 2
            )
        out[key] = value
    return out


def runtime_env_of(
    runtime_env: str | None, runtime_env_json: str | None, working_dir: str | None, app_dir: str
) -> dict[str, Any]:
    """Ray's parse_runtime_env_args, with the folder replicas import from made explicit:
    ``--working-dir``, else the runtime env's own, else ``--app-dir``."""
    if runtime_env is not None and runtime_env_json is not None:
        raise CommandError("Only one of --runtime-env and --runtime-env-json can be provided.", 2)
    env: Any = {}
    if runtime_env is not None:
        try:
            env = yaml.safe_load(Path(runtime_env).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"--runtime-env: cannot read {runtime_env}: {exc}", 2) from None
    elif runtime_env_json is not None:
        try:
            env = json.loads(runtime_env_json)
        except ValueError as exc:
            raise CommandError(f"--runtime-env-json: not JSON ({exc})", 2) from None
    if not isinstance(env, dict):
        raise CommandError("--runtime-env/--runtime-env-json: must be a mapping", 2)
    folder = working_dir or env.get("working_dir") or app_dir
    if not isinstance(folder, str) or not Path(folder).is_dir():
        raise CommandError(f"working_dir: no such local folder: {folder}", 2)
    return {**env, "working_dir": str(Path(folder).resolve())}


def gateway_port() -> int:
    """The gateway port this home's drivers use (STEADY_SERVE_HTTP_PORT, else Ray's 8000)."""
    from steadyserve.serve import api  # the serve package only when a command needs it

    try:
        return api.http_port()
    except ValueError as exc:
        raise CommandError(str(exc), 2) from None


def run_config(
    import_path: str, name: str, route_prefix: str | None, args: dict[str, str], env: dict[str, Any]
) -> dict[str, Any]:
    """The one-application Ray config ``serve run IMPORT_PATH`` stands for."""
    from steadyserve.serve.api import HTTP_PORT_ENV

    if route_prefix is not None and not route_prefix.startswith("/"):
        raise CommandError(
            f"Invalid route_prefix '{route_prefix}', must start with a forward slash ('/')", 2
        )
    if not name:
        raise CommandError("--name: must be a non-empty string", 2)
    app: dict[str, Any] = {"name": name, "route_prefix": route_prefix, "import_path": import_path}
    app["runtime_env"] = env
    if args:
        app["args"] = args
    config: dict[str, Any] = {"applications": [app]}
    if HTTP_PORT_ENV in os.environ:  # named, as serve.run names it (serve/api.py)
        config = {"http_options": {"port": gateway_port()}, **config}
    return config


def _written_run_config(config: dict[str, Any], name: str) -> tuple[Path, str | None]:
    """The generated config in the home, one file per application name: running the
    same name again updates that application, as Ray's ``serve run`` does. Also the
    file's earlier text (None: there was none), put back if the deploy is refused."""
    from steadyserve.compat.ray_deployment import name_safe

    folder = _home().ensure().root / "ray_run"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name_safe(name) or DEFAULT_APP_NAME}.yaml"
    earlier = path.read_text(encoding="utf-8") if path.is_file() else None
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path, earlier


def _put_back(path: Path, earlier: str | None) -> None:
    """A refused deploy (exit 2) changed nothing: neither does the generated file."""
    if earlier is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(earlier, encoding="utf-8")


def _app_services(client: Client) -> list[dict[str, Any]]:
    return [s for s in client.call("GET", "/api/v1/services")["services"] if s.get("application")]


def _block_until_interrupted() -> None:
    click.echo("Running; Ctrl-C shuts the applications down (as Ray's serve run).", err=True)
    while True:
        time.sleep(1)


def ray_group(deploy: click.Command, status: click.Command) -> click.Group:
    """The ``ray`` group; ``deploy`` and ``status`` are the ``steady`` commands it runs."""

    @click.group("ray")
    def ray() -> None:
        """Ray Serve's CLI: serve run/deploy/status/shutdown/build/config (docs/ray-serve.md).

        \b
        Example:
          steady ray run text_ml:app --non-blocking
          steady ray build text_ml:app -o serve_config.yaml
        """

    @ray.command("run")
    @click.argument("config_or_import_path")
    @click.argument("arguments", nargs=-1, required=False)
    @click.option("--runtime-env", default=None, help="A YAML file of the app's runtime_env.")
    @click.option("--runtime-env-json", default=None, help="The app's runtime_env as JSON.")
    @click.option(
        "--working-dir", default=None, help="Folder the replicas import from (overrides --app-dir)."
    )
    @click.option("--app-dir", "-d", default=".", show_default=True, help=APP_DIR_HELP)
    @address_option
    @click.option(
        "--blocking/--non-blocking",
        default=True,
        help="Block until Ctrl-C, then shut Serve down (default); or return once running.",
    )
    @click.option("--reload", "-r", is_flag=True, help="Accepted; does not apply here.")
    @click.option(
        "--route-prefix", default="/", show_default=True, help="The application's route prefix."
    )
    @click.option(
        "--name", default=DEFAULT_APP_NAME, show_default=True, help="The application's name."
    )
    @json_option
    @click.pass_context
    @reports_errors
    def ray_run(
        ctx: click.Context,
        config_or_import_path: str,
        arguments: tuple[str, ...],
        runtime_env: str | None,
        runtime_env_json: str | None,
        working_dir: str | None,
        app_dir: str,
        address: str | None,
        blocking: bool,
        reload: bool,
        route_prefix: str,
        name: str,
        as_json: bool,
    ) -> None:
        """serve run: deploy an import path (module:app [key=val ...]) or a config file.

        An import path becomes a one-application config (name, route_prefix,
        import_path, args, runtime_env with working_dir) deployed as steady deploy
        deploys it; a config file is deployed as it is. Returns once every
        deployment is running with --non-blocking; else blocks, and Ctrl-C shuts
        Serve down (serve.shutdown: every application, the gateway port), as Ray's.

        \b
        Example:
          steady ray run text_ml:app --non-blocking
          steady ray run builder:app model=small --route-prefix /small --name small
        """
        args = app_args(arguments)
        _address(address)
        if reload:
            not_applicable("--reload", "no file watcher; run again to redeploy")
        path = Path(config_or_import_path)
        if path.is_file():
            if args:
                click.echo(
                    "Application arguments are ignored when running a config file.", err=True
                )
            given = {"--route-prefix": route_prefix != "/", "--name": name != DEFAULT_APP_NAME}
            given |= {"--runtime-env": runtime_env is not None, "--working-dir": bool(working_dir)}
            given |= {"--runtime-env-json": runtime_env_json is not None}
            for option in (o for o, set_ in given.items() if set_):
                not_applicable(option, "the config file's applications say it")
            file, earlier = path, None
        else:
            env = runtime_env_of(runtime_env, runtime_env_json, working_dir, app_dir)
            config = run_config(config_or_import_path, name, route_prefix, args, env)
            file, earlier = _written_run_config(config, name)
        try:
            try:
                ctx.invoke(
                    deploy, file=file, wait=True, timeout=RUN_WAIT_S, yes=True, as_json=as_json
                )
            except SystemExit as exc:
                if exc.code == 2 and file != path:
                    _put_back(file, earlier)
                raise
            from steadyserve.serve import api

            client = Client(_home())
            api.wait_gateway(client, [s["name"] for s in _app_services(client)])
            if blocking:
                _block_until_interrupted()
        except KeyboardInterrupt:
            from steadyserve.serve import api

            click.echo("Got KeyboardInterrupt, shutting down...", err=True)
            api.shutdown()

    @ray.command("deploy")
    @click.argument("config_file_name", type=click.Path(dir_okay=False, path_type=Path))
    @address_option
    @json_option
    @click.pass_context
    @reports_errors
    def ray_deploy(
        ctx: click.Context, config_file_name: Path, address: str | None, as_json: bool
    ) -> None:
        """serve deploy: deploy a Ray Serve config (steady deploy FILE).

        \b
        Example:
          steady ray deploy serve_config.yaml
        """
        _address(address)
        ctx.invoke(deploy, file=config_file_name, as_json=as_json)

    @ray.command("status")
    @address_option
    @click.option("--name", "-n", default=None, help="Only this application's status.")
    @json_option
    @click.pass_context
    @reports_errors
    def ray_status_command(
        ctx: click.Context, address: str | None, name: str | None, as_json: bool
    ) -> None:
        """serve status: Ray's status YAML (steady status --format ray).

        \b
        Example:
          steady ray status --name app1
        """
        _address(address)
        if name is None:
            ctx.invoke(status, layout="ray", as_json=as_json)
            return
        services = Client(_home()).call("GET", "/api/v1/services")["services"]
        found = ray_status.ray_status(services)
        app = found["applications"].get(name)
        if app is None:
            raise CommandError(f'Application "{name}" does not exist.', 2)
        if as_json:
            _echo_json({**found, "applications": {name: app}})
        else:
            click.echo(yaml.safe_dump(app, sort_keys=False, default_flow_style=False), nl=False)

    @ray.command("shutdown")
    @address_option
    @click.option("--yes", "-y", is_flag=True, help="Bypass confirmation prompt.")
    @json_option
    @reports_errors
    def ray_shutdown(address: str | None, yes: bool, as_json: bool) -> None:
        """serve shutdown: take every application down and free the gateway port.

        Services made with steady up are kept (serve.shutdown()).

        \b
        Example:
          steady ray shutdown -y
        """
        _address(address)
        home = _home()
        _confirm(
            f'This will shut down Serve in "{home.root}" and delete all applications there', yes
        )
        apps: list[str] = []
        if home.read_controller_info() is not None:
            apps = sorted({str(s["application"]) for s in _app_services(Client(home))})
        from steadyserve.serve import api

        api.shutdown()
        if as_json:
            _echo_json({"applications": apps})
        else:
            click.echo("Shut down Serve: every application deleted, the gateway port freed.")

    from steadyserve.cli.ray_build import ray_build, ray_config  # the config-file verbs

    ray.add_command(ray_build)
    ray.add_command(ray_config)
    return ray
