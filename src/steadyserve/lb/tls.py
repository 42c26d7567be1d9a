"""TLS at the load balancer (SkyServe's ``service.tls``).

The controller passes the key and certificate paths to the LB process in its
environment (``wire.lb_process.env_for``); the LB builds its server context from them
(:func:`server_context_from_env`). Replicas keep speaking plain HTTP on
loopback: only the endpoint clients reach is encrypted, as in SkyServe.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

from steadyserve.wire.lb_process import CERTFILE_ENV, KEYFILE_ENV


def pair_problem(keyfile: str, certfile: str) -> str | None:
    """Why this key and certificate cannot serve TLS, naming both files, or None.

    The CLI asks before anything starts: the same load the LB does at start, so a
    key that does not match its certificate is one line and exit 2, not an LB
    that exits at every start (the service would be FAILED, lb_process.py)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile=certfile, keyfile=keyfile)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            why = "the key does not match the certificate"
        else:
            why = f"they do not load as a PEM certificate and key ({exc.reason or exc})"
        return f"certfile {certfile} and keyfile {keyfile}: {why}"
    except OSError as exc:
        return f"certfile {certfile} and keyfile {keyfile}: {exc.strerror or exc}"
    return None


def server_context_from_env(environ: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """A server context with the certificate chain, or None when TLS is off.

    A bad key or certificate raises (ssl.SSLError/OSError): the LB exits and its
    log says why, rather than serving plain HTTP on an endpoint meant to be HTTPS."""
    env = os.environ if environ is None else environ
    keyfile, certfile = env.get(KEYFILE_ENV), env.get(CERTFILE_ENV)
    if not keyfile or not certfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=certfile, keyfile=keyfile)
    return context
