"""``python -m supervisor --local NAME``: supervise a topology on this machine.
``python -m supervisor --cluster --zk HOSTS --data-dir D ...``: run the containers
nimbus assigns to this host (docs/CLUSTER.md)."""
import argparse
import math
import os
import sys

from bittern import logs, zkauth
from bittern.errors import ConfigError

from .session import DEFAULT_GRACE_SECS, GRACE_KEY

WILDCARDS = ("0.0.0.0", "::", "*", "")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """One line on stderr (no usage block), exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _port(text):
    try:
        p = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"port {p} is outside 1-65535")
    return p


def _positive(text):
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be at least 1")
    return n


def _seconds(key=None):
    """An argparse type: a positive, finite number of seconds (``key``: the setting it is)."""
    def convert(text):
        try:
            secs = float(text)
        except ValueError:
            secs = None
        if secs is None or not math.isfinite(secs) or secs <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds"
                                             + (f" ({key})" if key else ""))
        return secs
    return convert


def parser():
    ap = _Parser(prog="python -m supervisor")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--local", metavar="NAME", help="topology to run on this machine")
    mode.add_argument("--cluster", action="store_true", help="run the containers nimbus assigns here")
    ap.add_argument("--home", default=None, help="(--local) the state directory")
    ap.add_argument("--detached", action="store_true",
                    help="(--local) outlive the process that started us (bittern submit)")
    c = ap.add_argument_group("cluster mode")
    c.add_argument("--zk", metavar="HOSTS", help="ZooKeeper servers, host:port[,host:port...]")
    c.add_argument("--zk-root", default="/bittern", help="root znode (default /bittern)")
    zkauth.add_arguments(c)
    c.add_argument("--zk-connect-timeout", type=float, default=15.0, metavar="S",
                   help="give up when no ZooKeeper server answers within S seconds at start")
    c.add_argument("--session-timeout", type=_seconds(), default=10.0, metavar="S",
                   help="ZooKeeper session timeout: nimbus moves this host's containers this long "
                        "after it last heard from it (default 10)")
    c.add_argument("--session-lost-grace", type=_seconds(GRACE_KEY), default=DEFAULT_GRACE_SECS, metavar="S",
                   help="stop every container here after S seconds without a ZooKeeper session "
                        f"({GRACE_KEY}; default {DEFAULT_GRACE_SECS:g})")
    c.add_argument("--host", default="127.0.0.1",
                   help="address to bind, and the one other hosts reach this one at")
    c.add_argument("--slots", type=_positive, default=4, help="containers this host offers")
    c.add_argument("--base-port", type=_port, default=6700,
                   help="slot i uses ports BASE+2i (stream manager) and BASE+2i+1 (topology master)")
    c.add_argument("--log-port", type=_port, default=None, help="log server port (default BASE-1)")
    c.add_argument("--data-dir", metavar="D", help="code cache, run plans and logs")
    c.add_argument("--id", default=None, help="supervisor id (default HOST-BASEPORT)")
    return ap


def check_cluster_args(ap, a):
    if not a.zk:
        ap.error("--cluster needs --zk HOSTS")
    if not a.data_dir:
        ap.error("--cluster needs --data-dir D")
    if a.host.strip() in WILDCARDS:
        ap.error(f"--host {a.host!r} is a wildcard; give the address other hosts reach this one at")
    last = a.base_port + 2 * a.slots - 1
    if last > 65535:
        ap.error(f"--slots {a.slots} from --base-port {a.base_port} needs ports up to {last} (> 65535)")
    log_port = a.base_port - 1 if a.log_port is None else a.log_port
    if not 1 <= log_port <= 65535:
        ap.error(f"log port {log_port} is outside 1-65535; give --log-port")
    if a.base_port <= log_port <= last:
        ap.error(f"--log-port {log_port} is one of the slot ports {a.base_port}-{last}")
    try:
        auth = zkauth.resolve(a)
    except ConfigError as e:
        ap.error(str(e))
    if a.id is not None and (not a.id or "/" in a.id or a.id in (".", "..")):
        ap.error(f"--id {a.id!r} cannot name a ZooKeeper node")
    return auth, log_port


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if not a.cluster:
        from bittern.state import LocalStateManager, default_home

        from .local import LocalSupervisor
        home = a.home or default_home()
        logs.setup(f"{a.local} supervisor")
        LocalSupervisor(LocalStateManager(home), a.local, home, detached=a.detached).run()
        return 0
    auth, log_port = check_cluster_args(ap, a)
    from .cluster import ClusterSupervisor
    sup = ClusterSupervisor(a.zk, root=a.zk_root, auth=auth, host=a.host, slots=a.slots,
                            base_port=a.base_port, data_dir=a.data_dir, sup_id=a.id, log_port=log_port,
                            connect_timeout=a.zk_connect_timeout, session_timeout=a.session_timeout,
                            session_lost_grace=a.session_lost_grace)
    logs.setup(f"supervisor {sup.id}")
    if auth is None:
        zkauth.warn_insecure()
    try:
        return sup.run()
    except Exception as e:  # noqa: BLE001 - a daemon that cannot start: one clear line
        reason = " ".join(str(e).split()) or type(e).__name__
        print(f"{ap.prog}: error: supervisor {sup.id}: {reason}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
