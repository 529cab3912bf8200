"""A real cluster for the tests: nimbus processes and supervisor processes on loopback
ports, against the session's real ZooKeeper (a fresh root per cluster), driven
through the real CLI (``bittern --cluster URL ...``)."""
from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import psutil

from conftest import ROOT, processes_of, wait_for


def free_range(n, lo=20000, hi=32000):
    """A base port with ``n`` free ports from it (checked by binding each), below the
    kernel's ephemeral range (32768-60999): a port there can be taken by any outgoing
    connection meanwhile, and a client polling it before its server binds can connect to
    itself (TCP self-connect: it reads its own request back)."""
    import random
    for _ in range(200):
        base = random.randrange(lo, hi - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


class Daemon:
    def __init__(self, kind, cmd, log_path, env):
        self.kind = kind
        self.cmd = cmd
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.popen = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                      start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout=20.0):
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log.close()


class Cluster:
    def __init__(self, zk, tmp, slots=3):
        self.zk = zk
        self.dir = str(tmp)
        self.root = f"/t-{uuid.uuid4().hex[:10]}"
        self.slots = slots
        self.nimbuses = {}
        self.supervisors = {}
        self.hosts = {}  # supervisor id -> its address
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", BITTERN_HOME=os.path.join(self.dir, "clihome"))
        self.env.pop("BITTERN_CLUSTER", None)
        self.env.pop("BITTERN_TOKEN", None)
        # ZooKeeper with digest credentials, as a secure cluster runs (bittern/zkauth.py)
        self.auth = f"bittern:{secrets.token_hex(8)}"
        self.auth_file = os.path.join(self.dir, "zk-auth")
        with open(os.open(self.auth_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(self.auth + "\n")

    # -- daemons ----------------------------------------------------------------------------
    def start_nimbus(self, i=0, args=()):
        """``args``: more options (e.g. ``--config-file F``)."""
        port = free_range(1)
        data = os.path.join(self.dir, f"nimbus-{i}")
        os.makedirs(data, exist_ok=True)
        d = Daemon("nimbus", [sys.executable, "-m", "nimbus", "--zk", self.zk.hosts, "--zk-root", self.root,
                              "--port", str(port), "--data-dir", data, "--session-timeout", "4",
                              "--zk-auth-file", self.auth_file, *args],
                   os.path.join(self.dir, f"nimbus-{i}.log"), self.env)
        d.url = f"http://127.0.0.1:{port}"
        d.data = data
        self.nimbuses[i] = d
        wait_for(lambda: self._healthy(d), timeout=30, what=f"nimbus {i} up\n{d.tail()}")
        # up is not ready: it answers a moment before it (or another) has won the election,
        # and a write sent in between is refused ("a standby and knows no leader yet")
        wait_for(lambda: self._known_leader(d.url), timeout=30, what=f"nimbus {i} to know a leader\n{d.tail()}")
        return d

    def _healthy(self, d):
        if not d.alive():
            raise AssertionError(f"nimbus exited with {d.popen.returncode}:\n{d.tail()}")
        try:
            with urllib.request.urlopen(d.url + "/healthz", timeout=2) as r:
                return r.status == 200
        except (OSError, http.client.HTTPException):
            return False

    def start_supervisor(self, sid, slots=None, wrap=(), args=()):
        """Each supervisor gets its own loopback address (127.0.0.2, .3, ...: Linux
        routes all of 127/8 to lo), so containers on different "hosts" really talk
        over different addresses. ``wrap``: a command prefix that execs the rest (e.g.
        ``unshare`` to give this "host" its own view of a mount); ``args``: more options."""
        slots = slots or self.slots
        host = self.hosts.setdefault(sid, f"127.0.0.{len(self.hosts) + 2}")
        base = free_range(2 * slots + 1) + 1  # the log server takes base - 1
        data = os.path.join(self.dir, f"sup-{sid}")
        os.makedirs(data, exist_ok=True)
        d = Daemon("supervisor", [*wrap, sys.executable, "-m", "supervisor", "--cluster", "--zk", self.zk.hosts,
                                  "--zk-root", self.root, "--host", host, "--slots", str(slots),
                                  "--base-port", str(base), "--data-dir", data, "--id", sid,
                                  "--zk-auth-file", self.auth_file, *args],
                   os.path.join(self.dir, f"sup-{sid}.log"), self.env)
        d.data = data
        d.sid = sid
        self.supervisors[sid] = d
        wait_for(lambda: sid in [s["id"] for s in self.cluster_info()["supervisors"]] or self._dead(d),
                 timeout=30, what=f"supervisor {sid} registered")
        return d

    @staticmethod
    def _dead(d):
        if not d.alive():
            raise AssertionError(f"{d.kind} exited with {d.popen.returncode}:\n{d.tail()}")
        return False

    @property
    def token(self):
        for d in self.nimbuses.values():
            path = os.path.join(d.data, "token")
            if os.path.exists(path):
                return open(path).read().strip()
        raise AssertionError("no nimbus wrote a token")

    def urls(self):
        return ",".join(d.url for d in self.nimbuses.values())

    # -- clients ----------------------------------------------------------------------------
    def cli(self, *args, check=False, timeout=120, token=None, urls=None):
        env = dict(self.env, BITTERN_TOKEN=token or self.token)
        r = subprocess.run([sys.executable, "-m", "bittern", "--cluster", urls or self.urls(), *map(str, args)],
                           env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if check and r.returncode != 0:
            raise AssertionError(f"bittern {' '.join(map(str, args))} exited {r.returncode}\n"
                                 f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return r

    def api(self, path, method="GET", body=None, token=None, url=None):
        req = urllib.request.Request((url or self.leader_url()) + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Bearer {token or self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def cluster_info(self, url=None, zk_wait=30.0):
        """The cluster document of the first nimbus that answers; a 503 (nimbus cannot
        reach ZooKeeper, e.g. just after it restarted) is retried for ``zk_wait`` s."""
        deadline = time.monotonic() + zk_wait
        while True:
            unavailable = False
            for d in ([url] if url else [n.url for n in self.nimbuses.values() if n.alive()]):
                try:
                    status, doc = self.api("/api/v1/cluster", url=d)
                    if status == 200:
                        return doc
                    unavailable = unavailable or status == 503
                except OSError:
                    continue
            if not unavailable or time.monotonic() >= deadline:
                raise AssertionError("no nimbus answers" + (" (503: ZooKeeper unreachable)" if unavailable else ""))
            time.sleep(0.2)

    def leader_url(self, wait=30.0):
        """The URL of the leader as the live nimbuses know it, waited for up to ``wait`` s
        (while leadership changes no nimbus may know one)."""
        return wait_for(lambda: next((leader for d in list(self.nimbuses.values())
                                      if d.alive() and (leader := self._known_leader(d.url))), None),
                        timeout=wait, interval=0.2, what="a nimbus to know a leader")

    def _known_leader(self, url):
        """The leader nimbus ``url`` names in its cluster document; None if it names none
        or does not answer."""
        try:
            req = urllib.request.Request(url + "/api/v1/cluster", headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read()).get("leader") or None
        except (OSError, http.client.HTTPException, ValueError):
            return None

    def state(self):
        """A ZooKeeper state manager on this cluster's root (close it)."""
        from bittern.state.zk import ZkStateManager
        return ZkStateManager(self.zk.hosts, root=self.root, timeout=4.0, auth=self.auth)

    def assignment(self, name):
        with_state = self.state()
        try:
            return with_state.assignment(name)
        finally:
            with_state.close()

    def topology_pids(self, sid):
        """Pids of the topology processes a supervisor started (their command lines
        name its data dir)."""
        d = self.supervisors[sid]
        return [p.pid for p in processes_of(os.path.join(d.data, "run")) if p.pid != d.pid]

    def kill9_supervisor(self, sid):
        """kill -9 a supervisor and every process it started, as a host failure would."""
        d = self.supervisors[sid]
        pids = self.topology_pids(sid)
        for pid in [d.pid] + pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        d.popen.wait()
        wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                 for p in pids), timeout=10, what="killed processes gone")
        return pids

    def stop(self):
        for d in list(self.supervisors.values()) + list(self.nimbuses.values()):
            d.stop()
        deadline = time.monotonic() + 20
        while processes_of(self.dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        leaked = processes_of(self.dir)
        for p in leaked:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        assert not leaked, "the cluster left processes behind: " + ", ".join(
            f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in leaked if psutil.pid_exists(p.pid))



def all_pids(cluster):
    """Every topology process the cluster's supervisors run."""
    return [p for sid in cluster.supervisors for p in cluster.topology_pids(sid)]


def zk_view(cluster, name):
    """What ZooKeeper holds of ``name``: its record, assignment, checkpoint metadata; and
    the stored code archives."""
    st = cluster.state()
    try:
        return {"record": st.topology(name), "assignment": st.assignment(name),
                "checkpoints": st.children(f"checkpoints/{name}"), "code": st.children("code")}
    finally:
        st.close()


# -- the processes of a cluster, by role (tests/test_cluster_faults.py) -----------------------

def topology_processes(cluster):
    """Every live (not zombie) topology process started under any supervisor data dir of
    ``cluster``, found by command line, so an orphan of a dead supervisor counts too:
    ``[{"pid", "sid", "topology", "kind", "n", "status"}]`` with kind ``tmaster`` (n: 0),
    ``stmgr`` (n: its container) or ``instance`` (n: its task); ``status`` is psutil's
    (``stopped`` for a SIGSTOPped one)."""
    base = os.path.join(cluster.dir, "sup-")
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = p.info["cmdline"] or []
            if p.info["status"] == psutil.STATUS_ZOMBIE or "-m" not in cmd or "--plan" not in cmd:
                continue
            plan = cmd[cmd.index("--plan") + 1]
            if not plan.startswith(base):
                continue
            parts = plan[len(base):].split(os.sep)
            module = cmd[cmd.index("-m") + 1]
            if module == "streammgr.tmaster":
                kind, n = "tmaster", 0
            elif module == "streammgr":
                kind, n = "stmgr", int(cmd[cmd.index("--container") + 1])
            elif module == "instance":
                kind, n = "instance", int(cmd[cmd.index("--task") + 1])
            else:
                continue
            out.append({"pid": p.info["pid"], "sid": parts[0], "topology": parts[parts.index("run") + 1],
                        "kind": kind, "n": n, "status": p.info["status"]})
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, IndexError):
            continue
    return out


def process_tree(pid):
    """``pid``'s process and every descendant (psutil.Process objects, so a signal never
    reaches a recycled pid); [] if it is gone."""
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def signal_processes(procs, sig):
    """Send ``sig`` to each of ``procs`` (psutil.Process) that is still there."""
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def alive(proc):
    """A psutil.Process that still runs (not gone, not a zombie)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_leftovers(cluster, names=None, wait=30.0):
    """Wait up to ``wait`` s for the topology processes of ``names`` (None: every
    topology) to be gone; SIGKILL those that are not, and describe them (one string each)."""
    def left():
        return [p for p in topology_processes(cluster) if names is None or p["topology"] in names]
    try:
        wait_for(lambda: not left(), timeout=wait, interval=0.25)
        return []
    except AssertionError:
        pass
    procs = left()
    for p in procs:
        try:
            os.kill(p["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    return [f"{p['topology']}/{p['kind']}-{p['n']} on {p['sid']} (pid {p['pid']}, {p['status']})" for p in procs]


def doubled_containers(census, container_of):
    """Containers that ran twice in a census (``[(time, topology_processes(...))]``):
    ``{(topology, container): [(time, "kind-n", ["sid:pid:status", ...])]}``, where a
    container runs twice when two processes that are not SIGSTOPped (a frozen one does
    not run) have its topology master, its stream manager or one of its tasks
    (``container_of``: ``{topology: {task: container}}``)."""
    out = {}
    for t, procs in census:
        by = {}
        for p in procs:
            if p["status"] not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                by.setdefault((p["topology"], p["kind"], p["n"]), []).append(p)
        for (topo, kind, n), ps in by.items():
            if len(ps) > 1:
                cont = container_of[topo][n] if kind == "instance" else n
                out.setdefault((topo, cont), []).append(
                    (t, f"{kind}-{n}", sorted(f"{p['sid']}:{p['pid']}:{p['status']}" for p in ps)))
    return out


class ListSampler:
    """``bittern --cluster URLS list --json`` run again and again in ``threads`` background
    threads (each one call at a time, starting every ``every`` s or when the last one
    returned): ``samples`` holds ``(start, end, exit code, {name: state} or None, stderr
    in one line)``, with time.monotonic() times."""

    def __init__(self, cluster, every=0.5, threads=2):
        self.cluster, self.every, self.n = cluster, every, threads
        self.samples = []
        self._stop = threading.Event()
        self._threads = []

    def start(self):
        for _ in range(self.n):
            t = threading.Thread(target=self._loop, daemon=True)
            t.start()
            self._threads.append(t)
            time.sleep(self.every / self.n)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _loop(self):
        while not self._stop.is_set():
            ts = time.monotonic()
            try:
                r = self.cluster.cli("list", "--json", timeout=30, urls=",".join(
                    d.url for d in list(self.cluster.nimbuses.values())))
                rc, text, err = r.returncode, r.stdout, " ".join(r.stderr.split())
            except Exception as e:  # noqa: BLE001 - a CLI that hangs is a finding too
                rc, text, err = -1, "", f"{type(e).__name__}: {e}"
            states = None
            if rc == 0:
                try:
                    states = {row["name"]: row["state"] for row in json.loads(text)}
                except (ValueError, KeyError, TypeError):
                    rc, err = -2, f"not a JSON list: {text[:200]!r}"
            te = time.monotonic()
            self.samples.append((ts, te, rc, states, err))
            self._stop.wait(max(0.0, self.every - (te - ts)))

    def cadence(self):
        """One line: how many samples, how far apart, how long a call took."""
        starts = sorted(s[0] for s in self.samples)
        gaps = [b - a for a, b in zip(starts, starts[1:])] or [0.0]
        took = max([te - ts for ts, te, *_ in self.samples] or [0.0])
        return (f"{len(self.samples)} list samples (every {sum(gaps) / len(gaps):.2f}s on average, at most "
                f"{max(gaps):.2f}s apart; a call took up to {took:.2f}s)")


LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"  # bittern's log lines begin with logging's asctime


class EngineLog:
    """What the cluster's daemons and topology masters say in their logs, as
    time.monotonic() times: the engine's own word on when it was whole again."""

    def __init__(self, cluster):
        self.dir = cluster.dir
        self.offset = time.time() - time.monotonic()

    def _times(self, path, text):
        """Monotonic times of the lines of ``path`` that contain ``text``."""
        from datetime import datetime
        out = []
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    if text in line:
                        try:
                            out.append(datetime.strptime(line[:23], LOG_TIME).timestamp() - self.offset)
                        except ValueError:
                            pass  # a traceback's line that quotes the text
        except FileNotFoundError:
            pass
        return out

    def sessions(self, sid):
        """Supervisor ``sid``'s ZooKeeper sessions: (times lost, times renewed)."""
        log = os.path.join(self.dir, f"sup-{sid}.log")
        return self._times(log, "ZooKeeper session lost"), self._times(log, "new ZooKeeper session")

    def tmaster(self, sid, topology):
        """The topology master of ``topology`` on supervisor ``sid``: (times it came up,
        times it had every task registered)."""
        log = os.path.join(self.dir, f"sup-{sid}", "logs", topology, "tmaster.log")
        return (self._times(log, f"topology master of {topology} up at"),
                self._times(log, f"topology {topology} is running"))
