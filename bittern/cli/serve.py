"""``bittern serve``: the HTTP API (JSON) and the Prometheus export of the local
cluster, in the foreground until Ctrl-C or SIGTERM.

Every endpoint but ``/healthz`` needs ``Authorization: Bearer TOKEN``, the token being
the file ``<home>/token`` (0600, made at the first start, bittern/auth.py); Prometheus
scrapes with ``authorization: {type: Bearer, credentials_file: <home>/token}``.
``--insecure`` serves without a token: any local user can then read everything."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from .. import auth, logs
from ..errors import BitternError
from ..httpapi import is_loopback, make_server
from ..httpsafe import IDLE_SECS, MAX_TIMEOUT_SECS
from ..monitor import LocalSource
from ..promexport import prometheus_client

log = logging.getLogger("bittern.serve")

INSECURE_WARNING = ("WARNING: --insecure: the API answers without a token, so any local user (and anyone "
                    "who can reach the port) can read every topology's plan, config and errors")


def add_parser(sub):
    p = sub.add_parser(
        "serve", help="serve the HTTP API (JSON) and Prometheus /metrics (token: <home>/token)",
        description="Serve the HTTP API and Prometheus /metrics. Every endpoint but /healthz needs "
                    "'Authorization: Bearer TOKEN', TOKEN being the file <home>/token (made at the first "
                    "start, mode 0600). Prometheus scrapes it with: authorization: {type: Bearer, "
                    "credentials_file: <home>/token}.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (plain HTTP: the token crosses the network in clear)")
    p.add_argument("--insecure", action="store_true",
                   help="serve without a token: any local user can read every topology's plan, config and errors")
    p.add_argument("--allow-actions", action="store_true",
                   help="take activate, deactivate, kill and rebalance (POST/DELETE, with the token: the web UI's "
                        "buttons); without it the API and the web UI are read-only")
    p.add_argument("--timeout", type=float, default=None, metavar="SECS",
                   help=f"seconds a client may stay idle or take per read (a whole request: twice that; "
                        f"default ${{BITTERN_HTTP_TIMEOUT}} or {IDLE_SECS:g})")
    p.set_defaults(func=main, local_only="`bittern serve` serves the local state directory; in cluster mode "
                                         "every nimbus serves the same API itself (GET URL/api/v1/topologies)")


def main(args, state, home):
    if not is_loopback(args.host) and not args.allow_remote:
        raise BitternError(f"refusing to serve on {args.host!r}: it is not a loopback address and the API is "
                           "plain HTTP, so the token (or, with --insecure, every topology's plan, config and "
                           "errors) would cross the network in clear; pass --allow-remote to do it anyway")
    if not 0 <= args.port <= 65535:
        raise BitternError(f"--port must be 0-65535, got {args.port}")
    if args.timeout is not None and not 0.1 <= args.timeout <= MAX_TIMEOUT_SECS:
        raise BitternError(f"--timeout must be from 0.1 to {MAX_TIMEOUT_SECS:g} seconds, got {args.timeout:g}")
    if args.allow_actions and args.insecure:
        raise BitternError("--allow-actions needs the token: it cannot be combined with --insecure (anyone could "
                           "then kill or rebalance every topology)")
    token, token_file = None, os.path.join(home, auth.TOKEN_FILE)
    if args.insecure:
        print(INSECURE_WARNING, file=sys.stderr, flush=True)
    else:
        token = auth.load_or_create_token(home)
    logs.setup("serve")
    source = LocalSource(state)
    try:
        server = make_server(source, args.host, args.port, token=token, insecure=args.insecure,
                             idle_secs=args.timeout)
    except OSError as e:
        source.close()
        raise BitternError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    except BitternError:
        source.close()
        raise
    mount_webui(server, source, state, home, token, args)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="http", daemon=True)
    thread.start()
    access = ("NO AUTHENTICATION (--insecure): any local user can read every topology's plan, config and errors"
              if args.insecure else f"token in {token_file}: send Authorization: Bearer TOKEN")
    print(f"bittern API at {server.url}api/v1/topologies, Prometheus at {server.url}metrics, web UI at "
          f"{server.url}ui/ ({'actions allowed' if args.allow_actions else 'read-only'}) "
          f"(state {home}; {access}; Ctrl-C stops)", flush=True)
    if prometheus_client is None:
        print("note: prometheus_client is not installed, /metrics answers 501 "
              "(pip install bittern[metrics])", flush=True)
    try:
        while not stop.wait(0.5):
            if not thread.is_alive():
                raise BitternError("the HTTP server stopped unexpectedly (see the log above)")
    finally:
        log.info("stopping the HTTP server")
        server.shutdown()
        server.server_close()
        thread.join(5)
        with server.api.lock:
            source.close()
        for s, h in previous.items():
            signal.signal(s, h)
    print("bittern API stopped", flush=True)
    return 0


def mount_webui(server, source, state, home, token, args):
    """The web UI under /ui/ (bittern/webui), and the actions with --allow-actions."""
    from ..webui import LocalLogs, WebUI, api_reader
    from ..webui.actions import LocalActions

    read = api_reader(server.api)

    def drop(name):
        with server.api.lock:
            source.drop(name)

    server.actions = LocalActions(state, home, drop=drop) if args.allow_actions else None
    server.webui = WebUI(read, lambda: token, insecure=args.insecure, mode="local",
                         actions=args.allow_actions, logs=LocalLogs(home))
