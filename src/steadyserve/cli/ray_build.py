"""``steady ray build`` and ``steady ray config``: Ray Serve's ``serve build`` (write
the config of import paths, as Ray's scripts.py does; see cli/ray_cli.py for the
version followed) and ``serve config`` (each application's config as deployed).

``build`` describes each graph in a subprocess (compat/ray_graph.py: user code is
never imported here); ``config`` reads back the file each application was last
deployed from, as the controller stored it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
import yaml

from steadyserve import __version__
from steadyserve.cli.common import _echo_json, _home, json_option, reports_errors
from steadyserve.cli.ray_cli import (
    APP_DIR_HELP,
    _address,
    _app_services,
    address_option,
    gateway_port,
    not_applicable,
)
from steadyserve.client.connection import Client, CommandError


class BuildDumper(yaml.SafeDumper):
    """Ray's ServeDeploySchemaDumper: a blank line between the top levels."""

    def write_line_break(self, data: str | None = None) -> None:
        super().write_line_break(data)
        if len(self.indents) <= 4:
            super().write_line_break()


def app_config(import_path: str, name: str, app_dir: Path, base: Path) -> dict[str, Any]:
    """One application of ``serve build``: name, route_prefix, import_path,
    runtime_env, and each deployment with the options it was bound with."""
    from steadyserve.compat.ray_deployment import DEPLOYMENT_KEYS
    from steadyserve.compat.ray_graph import Runtime, describe_graph
    from steadyserve.spec.errors import SpecError

    if ":" not in import_path and "." not in import_path:
        raise CommandError(f"{import_path}: not an import path (module:attr)", 2)
    try:
        found = describe_graph(import_path, app_dir, {}, Runtime())
    except SpecError as exc:
        raise CommandError(f"{import_path}: {exc.message}", 2) from None
    route_prefix = "/"
    deployments = []
    for info in found or []:
        options = dict(info.get("options") or {})
        if info.get("ingress") and isinstance(options.get("route_prefix"), str):
            route_prefix = options["route_prefix"]
        kept = {k: v for k, v in options.items() if k in DEPLOYMENT_KEYS and k != "name"}
        deployments.append({"name": info["name"], **kept})
    # Ray writes runtime_env: {} (the code is on the cluster's path); here the code is
    # where --app-dir says, named relative to the file so steady deploy finds it.
    where = os.path.relpath(app_dir.resolve(), base.resolve())
    where = str(app_dir.resolve()) if where.startswith("..") else where
    app: dict[str, Any] = {"name": name, "route_prefix": route_prefix, "import_path": import_path}
    app["runtime_env"] = {} if where == "." else {"working_dir": where}
    if deployments:
        app["deployments"] = deployments
    return app


@click.command("build")
@click.argument("import_paths", nargs=-1, required=True)
@click.option("--app-dir", "-d", default=".", show_default=True, help=APP_DIR_HELP)
@click.option(
    "--output-path",
    "-o",
    default=None,
    help="Local path where the config is written (YAML); default: printed to stdout.",
)
@click.option(
    "--kubernetes-format",
    "--kubernetes_format",
    "-k",
    "kubernetes_format",
    is_flag=True,
    help="Accepted; does not apply here.",
)
@click.option("--grpc-servicer-functions", multiple=True, help="Accepted; does not apply here.")
@json_option
@reports_errors
def ray_build(
    import_paths: tuple[str, ...],
    app_dir: str,
    output_path: str | None,
    kubernetes_format: bool,
    grpc_servicer_functions: tuple[str, ...],
    as_json: bool,
) -> None:
    """serve build: write the config of IMPORT_PATHS, for steady deploy / ray deploy.

    Applications are named app1, app2, ... as Ray names them, each with its
    deployments' bound options; http_options.port is this home's gateway port.

    \b
    Example:
      steady ray build text_ml:app -o serve_config.yaml
    """
    if kubernetes_format:
        not_applicable("--kubernetes-format", "no Kubernetes here; the config is steady's")
    if grpc_servicer_functions:
        not_applicable("--grpc-servicer-functions", "the gateway speaks HTTP only")
    folder = Path(app_dir)
    if not folder.is_dir():
        raise CommandError(f"--app-dir: no such folder: {app_dir}", 2)
    out = Path(output_path) if output_path else None
    if out is not None and not out.parent.resolve().is_dir():
        raise CommandError(f"--output-path: no such folder: {out.parent}", 2)
    base = out.parent if out is not None else Path.cwd()
    apps = [app_config(p, f"app{i + 1}", folder, base) for i, p in enumerate(import_paths)]
    config = {"http_options": {"port": gateway_port()}, "applications": apps}
    text = (
        f"# This file was generated using `steady ray build` (Ray's `serve build`)"
        f" on SteadyServe v{__version__}.\n\n"
    )
    text += yaml.dump(config, Dumper=BuildDumper, default_flow_style=False, sort_keys=False)
    text = text.rstrip("\n") + "\n"
    if out is not None:
        out.write_text(text, encoding="utf-8")
    if as_json:
        _echo_json({"config": config, "output_path": str(out) if out is not None else None})
    elif out is None:
        click.echo(text, nl=False)
    if len(import_paths) > 1 and not as_json:
        click.echo("The application names are app1, app2, ...: rename as necessary.", err=True)


@click.command("config")
@address_option
@click.option("--name", "-n", default=None, help="Only this application's config.")
@json_option
@reports_errors
def ray_config(address: str | None, name: str | None, as_json: bool) -> None:
    """serve config: each application's config as it was last deployed.

    Applications made by serve.run in Python have none (as in Ray).

    \b
    Example:
      steady ray config --name app1
    """
    _address(address)
    client = Client(_home())
    configs: dict[str, dict[str, Any]] = {}
    for svc in _app_services(client):
        app = str(svc["application"])
        if app in configs or (name is not None and app != name):
            continue
        sent = client.call("GET", f"/api/v1/services/{svc['name']}/spec?version={svc['version']}")
        entry = _app_entry(sent.get("yaml") or "", app)
        if entry is not None:
            configs[app] = entry
    if name is not None and name not in configs:
        raise CommandError(f'No config has been deployed for application "{name}".', 2)
    if as_json:
        _echo_json({"applications": list(configs.values())})
        return
    texts = [yaml.safe_dump(c, sort_keys=False) for c in configs.values()]
    click.echo("\n---\n\n".join(texts), nl=False)


def _app_entry(text: str, app: str) -> dict[str, Any] | None:
    """Application ``app``'s entry of the Ray config ``text``; None if it has none."""
    from steadyserve.compat.ray_deployment import name_safe

    try:
        data = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return None
    apps = data.get("applications") if isinstance(data, dict) else None
    for entry in apps if isinstance(apps, list) else []:
        if (
            isinstance(entry, dict)
            and (name_safe(str(entry.get("name", "default"))) or "default") == app
        ):
            return entry
    return None
