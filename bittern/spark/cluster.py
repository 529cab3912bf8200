"""Where a SparkSpout's reads run, chosen by ``spout.spark.master``:

``local[k]`` (the default, ``local[1]``)
    each spout task starts its own JVM (PySpark's gateway) and reads in it.
``spark://HOST:PORT`` (a Spark standalone cluster)
    the spout tasks of a topology on one machine share ONE Spark application: the
    first task to need it starts a *driver helper* (``python -m bittern.spark.driver``,
    its own session, not a child of any task) that runs a Spark Connect server in
    client deploy mode against the master; its executors run on the cluster's
    workers. Every task, the first included, is a Spark Connect client of that
    helper: no JVM in a spout process. The helper stops its JVM and exits once no
    registered task process has been alive for ``spout.spark.driver.linger.seconds``.
``sc://HOST:PORT`` (Spark Connect)
    the spout process holds only the ``pyspark.sql.connect`` client (gRPC); the
    reads run in the server's application.

This module holds what these modes need besides the spout: parsing the master,
the checks made before anything starts (:func:`preflight_master`), the secret,
the Connect session, and the helper's bookkeeping (:class:`HelperDir`).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from urllib.parse import urlsplit

from ..privdir import private_dir
from .source import SparkSourceError, run_apart

__all__ = ["parse_master", "preflight_master", "read_secret", "connect_session", "HelperDir",
           "check_versions", "helper_should_stop"]

_LOCAL = re.compile(r"^local(\[(\d+|\*)\])?$")


def parse_master(master):
    """``("local", "local[k]")``, ``("standalone", host, port)`` or ``("connect", host, port,
    params)`` for a ``spout.spark.master`` value; SparkSourceError naming it otherwise."""
    m = str(master or "local[1]").strip()
    if _LOCAL.match(m):
        if m.endswith("[0]"):
            raise SparkSourceError(f"spout.spark.master {m!r}: local needs at least one thread")
        return ("local", m)
    if m.startswith(("spark://", "sc://")):
        head, _, params = m.partition("/;") if m.startswith("sc://") else (m, "", "")
        try:
            u = urlsplit(head)
            host, port = u.hostname, u.port
        except ValueError as e:
            raise SparkSourceError(f"spout.spark.master {m!r}: {e}") from None
        if not host or port is None or (u.path not in ("", "/")):
            raise SparkSourceError(f"spout.spark.master {m!r}: expected "
                                   f"{'spark' if m.startswith('spark') else 'sc'}://HOST:PORT")
        if m.startswith("spark://"):
            return ("standalone", host, port)
        kv = dict(p.split("=", 1) for p in params.split(";") if "=" in p)
        return ("connect", host, port, kv)
    raise SparkSourceError(f"spout.spark.master {m!r}: not local[k], spark://HOST:PORT (standalone) "
                           "or sc://HOST:PORT (Spark Connect)")


_M_ARENA_MAX = -8  # glibc mallopt parameter


def _libc():
    import ctypes
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def limit_malloc_arenas(n):
    """Cap glibc's malloc arenas of this process at ``n`` (0: leave them alone). A Spark
    Connect client's gRPC threads would each get an arena of their own (up to 8 per
    core), each keeping freed memory; with a cap they share. Applies to the threads that
    allocate for the first time after the call. False where this is not glibc."""
    libc = _libc() if n and n > 0 else None
    return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, int(n)) == 1)


def trim_malloc():
    """Give the free memory at the top of malloc's heaps back to the system."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def _reach(master, host, port, timeout=5.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else (str(e) or type(e).__name__)
        raise SparkSourceError(f"spout.spark.master {master}: nothing answers at {host}:{port} ({why})") from None


def read_secret(config):
    """The secret of ``spout.spark.secret.file`` (None if unset): the standalone cluster's
    ``spark.authenticate.secret`` and the Connect server's token (scripts/spark.sh writes one)."""
    path = (config or {}).get("spout.spark.secret.file")
    if not path:
        return None
    try:
        with open(os.path.expanduser(str(path)), encoding="utf-8") as f:
            secret = f.read().strip()
    except OSError as e:
        raise SparkSourceError(f"spout.spark.secret.file {path}: {e.strerror or e}") from None
    if not secret:
        raise SparkSourceError(f"spout.spark.secret.file {path}: the file is empty")
    return secret


def check_versions(server, client):
    """None if a Connect server of version ``server`` serves a client of ``client``
    (same major version; a client newer in minor than the server may send plans the
    server does not know), else the one-line reason."""
    def mm(v):
        m = re.match(r"(\d+)\.(\d+)", str(v))
        return (int(m.group(1)), int(m.group(2))) if m else None
    s, c = mm(server), mm(client)
    if s is None:
        return f"the server reports no Spark version ({server!r})"
    if s[0] != c[0] or c[1] > s[1]:
        return f"the server runs Spark {server}, this client is pyspark {client} (needs Spark {c[0]}.{c[1]}+ and < {c[0] + 1})"
    return None


def connect_url(host, port, params, token):
    """The ``sc://`` URL for a client. With a token and a loopback host the host is
    written ``localhost``: pyspark then uses gRPC local credentials instead of TLS."""
    params = dict(params or {})
    if token:
        params.setdefault("token", token)
        if host in ("127.0.0.1", "::1", "localhost"):
            host = "localhost"
    tail = "".join(f";{k}={v}" for k, v in params.items())
    return f"sc://{host}:{port}/{tail}" if tail else f"sc://{host}:{port}"


def connect_session(host, port, params, token, what, retries=4):
    """A Spark Connect session (the client only, no JVM); checks the server's version.
    ``what`` names the server in errors."""
    if __import__("importlib").util.find_spec("grpc") is None:
        raise SparkSourceError("SparkSpout with Spark Connect needs pyspark's connect extra: "
                               "pip install 'bittern[spark-connect]'")
    from pyspark.sql import SparkSession
    import pyspark
    from pyspark.sql.connect.client.retries import DefaultPolicy
    spark = SparkSession.builder.remote(connect_url(host, port, params, token)).create()
    # pyspark retries an unavailable server for 10 minutes by default: a few seconds here,
    # then the read fails visibly and the spout starts it again (spout.spark.connect.retries)
    spark.client.set_retry_policies([DefaultPolicy(max_retries=int(retries))])
    try:
        version = spark.version
    except Exception as e:  # noqa: BLE001 - gRPC says why in its own words
        try:
            spark.stop()
        except Exception:  # noqa: BLE001
            pass
        raise SparkSourceError(f"{what}: Spark Connect at {host}:{port} refused the session: "
                               f"{_first_line(e)}") from None
    bad = check_versions(version, pyspark.__version__)
    if bad:
        spark.stop()
        raise SparkSourceError(f"{what}: incompatible Spark Connect server at {host}:{port}: {bad}")
    return spark


def _first_line(e):
    text = str(getattr(e, "getMessage", lambda: None)() or e)
    for pat in (r'details = "([^"]*)"', r"\[([A-Z_.]+)\][^\n]*"):
        m = re.search(pat, text)
        if m:
            return m.group(0) if m.group(0).startswith("[") else m.group(1)
    return (text.strip().splitlines() or [type(e).__name__])[0][:300]


def preflight_master(config):
    """Run before any task starts: the master value parses, a cluster master answers on
    its port, a Connect server accepts a session (token) and runs a compatible
    version. One SparkSourceError naming the master otherwise."""
    config = config or {}
    master = str(config.get("spout.spark.master") or "local[1]")
    parsed = parse_master(master)
    if parsed[0] == "local":
        return parsed
    secret = read_secret(config)
    _reach(master, parsed[1], parsed[2])
    if parsed[0] == "connect":
        _check_connect_apart(master, parsed, secret)
    return parsed


_CHECK = """
import json, sys
from bittern.spark.cluster import connect_session
from bittern.spark.source import SparkSourceError, APART_FAILED
a = json.loads(sys.stdin.readline())
try:
    connect_session(a["host"], a["port"], a["params"], a["token"], a["what"]).stop()
except SparkSourceError as e:
    print(str(e), file=sys.stderr)
    sys.exit(APART_FAILED)
"""


def _check_connect_apart(master, parsed, secret, timeout=300.0):
    """The Connect session check of :func:`preflight_master`, in a child process: the
    pyspark Connect client (pandas, pyarrow, gRPC: ~130 MB) is not kept for the whole
    run by the process that submits (``bittern run`` stays up until the end)."""
    what = f"spout.spark.master {master}"
    run_apart(_CHECK, {"host": parsed[1], "port": parsed[2], "params": parsed[3], "token": secret, "what": what},
              f"{what}: checking the Spark Connect session", timeout)


# -- the standalone driver helper ------------------------------------------------------------

def _alive(pid, started=None):
    try:
        import psutil
        p = psutil.Process(int(pid))
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(p.create_time() - float(started)) < 1.0
    except Exception:  # noqa: BLE001 - gone, or not ours to see
        return False


def helper_should_stop(live_clients, jvm_alive, idle_since, now, linger):
    """The helper's decision each turn: ``("stop", reason)`` or ``("run", idle_since)``
    (``idle_since``: when the last client was seen gone, None while any lives)."""
    if not jvm_alive:
        return ("stop", "its Spark Connect JVM exited")
    if live_clients:
        return ("run", None)
    if idle_since is None:
        return ("run", now)
    if now - idle_since >= linger:
        return ("stop", f"no spout task for {linger:g}s")
    return ("run", idle_since)


class HelperDir:
    """The directory of one topology's driver helper on this machine (0700, under the
    temp dir): ``lock``, ``clients/<pid>`` (the task processes using it, with their
    start times), ``helper.pid``, ``server.json`` ({port, token, jvm}) once it serves,
    ``helper.log``, ``connect.properties`` (0600: it holds the cluster's secret)."""

    def __init__(self, topology, master, home=None):
        base = os.path.join(tempfile.gettempdir(), f"bittern-spark-{os.getuid()}")
        key = hashlib.sha1(f"{home or os.environ.get('BITTERN_HOME', '')}|{topology}|{master}".encode()).hexdigest()
        self.path = os.path.join(base, key[:16])
        # every task of the topology must find the same directory, so a squatted one (made by
        # another user, a symlink) is refused in one line rather than replaced
        private_dir(base, "Spark driver helpers' directory")
        private_dir(self.path, "Spark driver helper's directory")
        private_dir(os.path.join(self.path, "clients"), "Spark driver helper's directory")

    def file(self, name):
        return os.path.join(self.path, name)

    @contextmanager
    def locked(self):
        fd = os.open(self.file("lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def read_json(self, name):
        try:
            with open(self.file(name), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def write_json(self, name, doc):
        target = self.file(name)
        tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, target)

    def remove(self, name):
        try:
            os.unlink(self.file(name))
        except FileNotFoundError:
            pass

    def register(self, pid):
        import psutil
        self.write_json(f"clients/{pid}", {"pid": pid, "started": psutil.Process(pid).create_time()})

    def unregister(self, pid):
        self.remove(f"clients/{pid}")

    def live_clients(self):
        out = []
        for name in os.listdir(self.file("clients")):
            if name.startswith("."):
                continue
            doc = self.read_json(f"clients/{name}")
            if doc and _alive(doc["pid"], doc.get("started")):
                out.append(doc["pid"])
            else:
                self.remove(f"clients/{name}")
        return out

    def helper_pid(self):
        doc = self.read_json("helper.pid")
        return doc["pid"] if doc and _alive(doc["pid"], doc.get("started")) else None

    def attach(self, settings, timeout=240.0):
        """Register this process and return ``server.json`` of a serving helper, starting
        one if none runs. ``settings``: what the helper needs (master, secret file,
        Spark settings, linger)."""
        me = os.getpid()
        with self.locked():
            self.register(me)
            if self.helper_pid() is None:
                self.remove("server.json")
                self.write_json("settings.json", settings)
                log = open(self.file("helper.log"), "ab")
                proc = subprocess.Popen([sys.executable, "-m", "bittern.spark.driver", self.path],
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
                log.close()
                import psutil
                self.write_json("helper.pid", {"pid": proc.pid, "started": psutil.Process(proc.pid).create_time()})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = self.read_json("server.json")
            if doc and _alive(doc["jvm"]):
                return doc
            if self.helper_pid() is None:
                tail = ""
                try:
                    with open(self.file("helper.log"), encoding="utf-8", errors="replace") as f:
                        lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
                    tail = lines[-1][:300] if lines else ""
                except OSError:
                    pass
                raise SparkSourceError(f"spout.spark.master {settings['master']}: the driver helper exited "
                                       f"before serving ({tail or 'see ' + self.file('helper.log')})")
            time.sleep(0.2)
        raise SparkSourceError(f"spout.spark.master {settings['master']}: the driver helper did not serve "
                               f"within {timeout:.0f}s (see {self.file('helper.log')})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_listening(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spark_home():
    import pyspark
    return os.path.dirname(pyspark.__file__)


def stop_process(proc, grace=10.0):
    """TERM, then KILL after ``grace`` seconds; True once it is gone."""
    if proc.poll() is not None:
        return True
    try:
        proc.terminate()
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise
    return proc.poll() is not None
