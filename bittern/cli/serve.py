"""``bittern serve``: the HTTP API (JSON) and the Prometheus export of the local
cluster, in the foreground until Ctrl-C or SIGTERM."""
from __future__ import annotations

import logging
import signal
import threading

from .. import logs
from ..errors import BitternError
from ..httpapi import is_loopback, make_server, prometheus_client
from ..monitor import LocalSource

log = logging.getLogger("bittern.serve")


def add_parser(sub):
    p = sub.add_parser("serve", help="serve the HTTP API (JSON) and Prometheus /metrics")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the API has no authentication yet)")
    p.set_defaults(func=main, local_only="`bittern serve` serves the local state directory; in cluster mode "
                                         "every nimbus serves the same API itself (GET URL/api/v1/topologies)")


def main(args, state, home):
    if not is_loopback(args.host) and not args.allow_remote:
        raise BitternError(f"refusing to serve on {args.host!r}: it is not a loopback address and the HTTP "
                           "API has no authentication yet, so anyone who can reach it could read every "
                           "topology's plan, config and errors; pass --allow-remote to do it anyway")
    if not 0 <= args.port <= 65535:
        raise BitternError(f"--port must be 0-65535, got {args.port}")
    logs.setup("serve")
    source = LocalSource(state)
    try:
        server = make_server(source, args.host, args.port)
    except OSError as e:
        source.close()
        raise BitternError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name="http", daemon=True)
    thread.start()
    print(f"bittern API at {server.url}api/v1/topologies, Prometheus at {server.url}metrics "
          f"(state {home}; Ctrl-C stops)", flush=True)
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

