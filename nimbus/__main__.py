"""``python -m nimbus --zk HOSTS [--host ADDR] [--port 6627] --data-dir D [--config-file F]``
(also ``bittern nimbus ...``): run one nimbus; start several for high availability."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from bittern import logs, zkauth
from bittern.errors import BitternError, ConfigError
from bittern.privdir import private_dir
from bittern.state import open_state

from .api import NimbusApi, Server
from .daemon import Nimbus
from .store import KEY as STORE_KEY, load_cluster_config

log = logging.getLogger("bittern.nimbus")


def parse(argv):
    ap = argparse.ArgumentParser(prog="bittern nimbus", description="run a nimbus (cluster mode)")
    ap.add_argument("--zk", required=True, metavar="HOSTS", help="ZooKeeper hosts, host:port[,host:port...]")
    ap.add_argument("--zk-root", default="/bittern", metavar="PATH")
    zkauth.add_arguments(ap)
    ap.add_argument("--host", default="127.0.0.1", help="address to bind and advertise (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=6627)
    ap.add_argument("--data-dir", required=True, metavar="DIR", help="where the API token and logs go")
    ap.add_argument("--session-timeout", type=float, default=10.0, metavar="S")
    ap.add_argument("--config-file", metavar="FILE",
                    help="cluster-wide settings (TOML), e.g. bittern.checkpoint.dir: the shared checkpoint store "
                         "of exactly-once topologies that name none")
    ap.add_argument("--config", action="append", default=[], metavar="K=V",
                    help="a cluster-wide setting, over --config-file")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    try:
        cluster_conf = load_cluster_config(a.config_file, a.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        zk_auth = zkauth.resolve(a)
        private_dir(a.data_dir, "nimbus data directory")  # the API token, logs, savepoints
    except BitternError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logs.setup(f"nimbus {a.host}:{a.port}")
    if zk_auth is None:
        zkauth.warn_insecure(log)
    lost = threading.Event()
    try:
        state = open_state(f"zk://{a.zk}{a.zk_root}", auth=zk_auth, timeout=a.session_timeout,
                           on_lost=lost.set)
    except Exception as e:  # noqa: BLE001 - one line for the user, not a traceback
        print(f"error: cannot reach ZooKeeper at {a.zk}: {e}", file=sys.stderr)
        return 1
    try:
        log.info("ZooKeeper ACLs checked on %d nodes", state.verify_acls())
    except BitternError as e:
        print(f"error: {e}", file=sys.stderr)
        state.close()
        return 2
    try:
        server = Server((a.host, a.port), None)  # (timeouts: $BITTERN_HTTP_TIMEOUT, bittern/httpsafe.py)
    except OSError as e:
        print(f"error: cannot listen on {a.host}:{a.port}: {e}", file=sys.stderr)
        state.close()
        return 1
    except BitternError as e:
        print(f"error: {e}", file=sys.stderr)
        state.close()
        return 2
    url = f"http://{a.host}:{server.server_address[1]}"
    nimbus = Nimbus(state, url, a.data_dir, cluster_conf, secure=zk_auth is not None)
    server.api = NimbusApi(nimbus)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    nimbus.register()
    threads = [threading.Thread(target=server.serve_forever, name="http", daemon=True),
               threading.Thread(target=nimbus.run_election, name="election", daemon=True)]
    for t in threads:
        t.start()
    log.info("nimbus up at %s (ZooKeeper %s%s, token in %s)", url, a.zk, a.zk_root,
             os.path.join(a.data_dir, "token"))
    if cluster_conf.get(STORE_KEY):
        log.info("exactly-once topologies that name no %s keep their checkpoints in %s", STORE_KEY,
                 cluster_conf[STORE_KEY])
    print(f"nimbus listening on {url}", flush=True)
    try:
        while not stop.wait(0.5):
            if lost.is_set():  # the session expired: our ephemeral nodes and lease are gone
                lost.clear()
                log.warning("ZooKeeper session lost; re-registering")
                failed = state.reopen()
                if failed:
                    log.error("could not re-create %s after the session loss; exiting", failed)
                    return 2
    finally:
        nimbus.stop()
        server.shutdown()
        server.server_close()
        for t in threads:
            t.join(timeout=5.0)
        nimbus.source.close()
        state.close()
        log.info("nimbus %s stopped", url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
