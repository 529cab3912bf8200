"""The cluster supervisor: runs the containers nimbus assigns to this host's slots.

One per host (docs/CLUSTER.md). It registers ``supervisors/ID`` as an ephemeral
node, watches ``assignments/`` (a children watch, and a poll every second as a
safety net that also sees version changes), and for every assignment that
places containers in its slots:

* fetches the topology's code archive once into ``DATA/code/DIGEST`` (digest
  verified, see bittern/archive.py),
* writes the run plan of its part (supervisor/assignment.py) to
  ``DATA/run/NAME/plan.json`` (0600: it holds CURVE secrets),
* starts the topology master (if container 0 is here), the stream managers and
  the instances (supervisor/procs.py), and restarts what dies, with backoff.

A new assignment version (nimbus moved containers whose supervisor died) leaves
the containers here that did not move running: their plan is rewritten in place
and their stream managers re-read it on SIGHUP (streammgr/stmgr.py) to reach the
moved peers, so their spouts' pending trees and their bolts' state survive. Only
when the packing or the code changed are its containers restarted. An
assignment that disappears or no longer names this supervisor stops them. Code
that cannot be fetched or a plan that cannot be built is reported once as
``status/NAME`` FAILED (nimbus then fails the topology); that version is not
retried. While ZooKeeper is unreachable, or after the session expired until a
new one is open (``reopen()`` re-registers), the containers keep running as
they are; the supervisor reads the assignments again when it is back. Not for
ever: nimbus moves the containers of a supervisor whose session expired, so once
it has been without a session for ``supervisor.session.lost.grace.secs``
(``--session-lost-grace``; supervisor/session.py) it stops them all and forgets
them, and starts what the assignments still place here when a session is back. A
stream manager or topology master that exits fenced (``EXIT_FENCED``: a newer copy
of its container runs elsewhere) is not restarted: every process of that topology
here stops, and the assignments are read again at once. It serves
its log files over HTTP (supervisor/logserver.py) with the cluster's API token.
On SIGTERM it stops every container, deletes its node and exits.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import signal
import threading
import time
import traceback

import psutil
from kazoo.exceptions import KazooException

from bittern import archive
from bittern.proc import stop_pids
from bittern.state.zk import ZkStateManager

from .assignment import AssignmentError, build_plan, code_of, entry_path, own_containers, version_of
from .logserver import LogServer
from bittern import curve, zkauth
from bittern.privdir import private_dir

from .procs import ProcessGroup, ipc_base, ipc_dir, stop_groups
from .session import DEFAULT_GRACE_SECS, GRACE_KEY, SessionGuard

log = logging.getLogger("bittern.supervisor")

POLL_SECS = 1.0
WATCH_SECS = 0.2  # how often the session watchdog looks
DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


class Pending(Exception):
    """Not ready yet (no topology record or no code in ZooKeeper): try again later."""


class Running:
    """A topology's containers on this supervisor."""

    def __init__(self, name, version, containers, digest, group, run_dir, ipc, asg):
        self.name, self.version, self.containers, self.digest = name, version, containers, digest
        self.group, self.run_dir, self.ipc, self.asg = group, run_dir, ipc, asg


class ClusterSupervisor:
    def __init__(self, zk_hosts, root="/bittern", auth=None, host="127.0.0.1", slots=4, base_port=6700,
                 data_dir="bittern-supervisor", sup_id=None, log_port=None, connect_timeout=15.0,
                 session_timeout=10.0, session_lost_grace=DEFAULT_GRACE_SECS):
        self.zk_hosts = zk_hosts
        self.root = "/" + "/".join(p for p in root.split("/") if p)
        self.auth = auth
        self.host = host
        self.slots = slots
        self.base_port = base_port
        self.data_dir = os.path.abspath(data_dir)
        self.id = sup_id or f"{host}-{base_port}"
        self.log_port = base_port - 1 if log_port is None else log_port
        self.connect_timeout = connect_timeout
        self.session_timeout = session_timeout
        self.state = None
        self.logserver = None
        self.token = None
        self.running = {}  # name -> Running
        self.failed = {}  # (name, version) -> {"line", "reported"}: not retried
        self.waiting = {}  # name -> why it cannot start yet (logged once)
        self.registered = False
        self.stopping = False
        self.started = time.time()
        self._wake = threading.Event()  # a watch fired, or a signal: look now
        self._lost = threading.Event()  # the ZooKeeper session expired
        self._next_sync = 0.0
        self._zk_trouble = False
        self._lock_fd = None
        self._up = False
        self._guard = SessionGuard(session_lost_grace, time.monotonic())  # ValueError naming the key
        # The session watchdog runs in a thread of its own: a ZooKeeper call made as the
        # connection went away waits in kazoo's queue until it is back, holding up the loop.
        # It only stops processes (under _procs_lock, as the loop checks them); the loop
        # forgets what it stopped (_session_stopped) when it is free again.
        self._procs_lock = threading.Lock()
        self._session_stopped = []  # the Running the watchdog stopped
        self._watchdog = None
        self._ipc_sub = "s" + hashlib.sha1(self.data_dir.encode()).hexdigest()[:8]  # ours alone

    @property
    def state_url(self):
        return f"zk://{self.zk_hosts}{self.root}"

    @property
    def log_url(self):
        return f"http://{self.host}:{self.log_port}"

    def _path(self, *parts):
        return os.path.join(self.data_dir, *parts)

    # -- start-up -------------------------------------------------------------------------
    def start(self):
        private_dir(self.data_dir, "supervisor data directory")  # plans with CURVE secrets, logs
        self._lock_data_dir()
        # nimbus seals each container's CURVE secret to this key (bittern/curve.py seal)
        self.keypair = curve.load_or_create_keypair(self._path("supervisor.key"))
        # our children died with our previous run (PR_SET_PDEATHSIG): their plans and
        # sockets are stale
        shutil.rmtree(self._path("run"), ignore_errors=True)
        shutil.rmtree(ipc_base(self._ipc_sub), ignore_errors=True)
        # kazoo logs every connection attempt; a failed start is one line of ours, and
        # afterwards the state manager reports interruptions itself
        kazoo_log = logging.getLogger("kazoo")
        kazoo_log.setLevel(logging.CRITICAL)
        try:
            self.state = ZkStateManager(self.zk_hosts, root=self.root, auth=self.auth, on_lost=self._on_lost,
                                        timeout=self.session_timeout, connect_timeout=self.connect_timeout)
        finally:
            kazoo_log.setLevel(logging.ERROR)
        # a node someone else wrote (a planted topology record or token) is refused: UnsafeNode
        log.info("ZooKeeper ACLs checked on %d nodes", self.state.verify_acls())
        try:
            self.logserver = LogServer(self.host, self.log_port, self._path("logs"), lambda: self.token)
        except OSError as e:
            raise RuntimeError(f"cannot serve logs on {self.host}:{self.log_port}: {e.strerror}") from None
        self.logserver.start()
        asked = time.monotonic()
        self.register(wait=3 * self.session_timeout)
        self._guard.alive(asked)
        self.token = self.read_token()
        self.state.watch_children("assignments", lambda names: self._wake.set())
        self._watchdog = threading.Thread(target=self._watch_loop, name="bittern-session-watchdog", daemon=True)
        self._watchdog.start()
        self._up = True
        log.info("supervisor %s up: %d slots from port %d on %s, logs at %s, data in %s",
                 self.id, self.slots, self.base_port, self.host, self.log_url, self.data_dir)

    def _lock_data_dir(self):
        fd = os.open(self._path("supervisor.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(f"data dir {self.data_dir} is in use by another supervisor") from None
        self._lock_fd = fd

    def registration(self):
        return {"id": self.id, "host": self.host, "slots": self.slots, "base_port": self.base_port,
                "log_url": self.log_url, "public_key": self.keypair[0], "cpu_count": os.cpu_count(),
                "memory_mb": psutil.virtual_memory().total // (1024 * 1024), "pid": os.getpid(),
                "started": self.started}

    def register(self, wait=0.0):
        """Create ``supervisors/ID``. A node of our previous run (killed before its
        session ended) blocks it until ZooKeeper expires that session: wait up to
        ``wait`` s for that, then give up (another live supervisor uses our id)."""
        deadline = time.monotonic() + wait
        told = False
        while not self.stopping:
            if self.state.ephemeral(f"supervisors/{self.id}", self.registration()):
                self.registered = True
                log.info("registered as supervisors/%s", self.id)
                return True
            if time.monotonic() >= deadline:
                if wait:
                    raise RuntimeError(f"supervisor id {self.id!r} is registered by another live "
                                       "process; give this one another --id or --base-port")
                return False
            if not told:
                log.warning("supervisors/%s belongs to another session (our previous run?); waiting "
                            "up to %.0fs for it to expire", self.id, wait)
                told = True
            time.sleep(0.5)
        return False

    def read_token(self):
        """The API token nimbus keeps at ``nimbus/token`` (a JSON string, a
        ``{"token": ...}`` document, or a blob); None until it exists."""
        try:
            doc = self.state.get("nimbus/token")
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            doc = doc.get("token")
        if doc is None:
            data = self.state.get_bytes("nimbus/token")
            doc = data.decode("utf-8", "replace") if data else None
        return doc.strip() if isinstance(doc, str) and doc.strip() else None

    # -- the loop -------------------------------------------------------------------------
    def run(self):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        try:
            self.start()
            while not self.stopping:
                self.step()
        finally:
            self.shutdown()
        return 0

    def stop(self):
        self.stopping = True
        self._wake.set()

    def _on_signal(self, signum, frame):
        self.stop()

    def _on_lost(self):
        self._lost.set()
        self._wake.set()

    def step(self):
        woken = self._wake.wait(0.1)
        if self.stopping:
            return
        if self._session_stopped:
            with self._procs_lock:
                self._forget_stopped()
        if self._lost.is_set():
            self._recover()
        now = time.monotonic()
        if woken or now >= self._next_sync:
            self._wake.clear()
            if not self._lost.is_set() and self.state.connected:
                self._next_sync = now + POLL_SECS
                self._sync_safely()
        with self._procs_lock:
            self._forget_stopped()
            for name, r in list(self.running.items()):
                r.group.check(self.stopping)
                if r.group.fenced and not self.stopping:
                    self._fenced(name, r)

    # -- without a session ----------------------------------------------------------------
    def _watch_loop(self):
        """Thread: the session watchdog."""
        while not self.stopping:
            try:
                self._watch_session()
            except Exception:  # noqa: BLE001 - never silent, never dead
                log.exception("session watchdog failed")
            time.sleep(WATCH_SECS)

    def _watch_session(self, connected=None):
        """Stop every container once we have been without a ZooKeeper session for
        longer than the grace (supervisor/session.py); ``connected``: what is known
        now (default: kazoo's connection, and no expired session waiting for reopen)."""
        state = self.state
        if state is None:
            return
        with self._procs_lock:
            if self.stopping:
                return
            if connected is None:
                connected = state.connected and not state.lost and not self._lost.is_set()
            self._guard.on_state(connected)
            now = time.monotonic()
            if not self._guard.due(now):
                return
            away, grace = self._guard.without(now), self._guard.grace
            running = sorted(self.running.copy().items())  # the loop may be in a sync: a copy is atomic
            if not running:
                log.warning("no ZooKeeper session for %.1fs (over %s = %gs); no containers run here",
                            away, GRACE_KEY, grace)
                return
            for name, r in running:
                log.warning("%s v%s: stopping containers %s: no ZooKeeper session for %.1fs, over %s = %gs "
                            "(nimbus moves them elsewhere); they start again if the assignment still places "
                            "them here once a session is back", name, r.version, r.containers, away, GRACE_KEY,
                            grace)
            stop_groups([r.group for _, r in running])
            self._session_stopped.extend(r for _, r in running)

    def _forget_stopped(self):
        """(Under _procs_lock.) Forget the topologies the watchdog stopped: their run
        dirs go, and the next sync starts what the assignments still place here. One
        that changed since (a sync that was waiting for ZooKeeper went on) is
        stopped whole."""
        stopped, self._session_stopped = self._session_stopped, []
        for name, r in list(self.running.items()):
            if any(r is s for s in stopped):
                self.stop_topology(name, forget=True, quiet=True)

    def _fenced(self, name, r):
        """A stream manager or the topology master of ``name`` exited fenced: a newer
        copy of its container runs elsewhere. Stop everything of ``name`` here, and
        read the assignment again now: what it still places here starts afresh."""
        cs = sorted(r.group.fenced)
        log.warning("container%s %s of %s %s fenced: a newer copy runs elsewhere; stopping its processes "
                    "here and reading the assignment again", "s" if len(cs) > 1 else "",
                    ", ".join(map(str, cs)), name, "were" if len(cs) > 1 else "was")
        self.stop_topology(name, forget=True, quiet=True)
        self.waiting.pop(name, None)
        self._next_sync = 0.0  # the next step syncs, if ZooKeeper is reachable
        self._wake.set()

    def _recover(self):
        """After an expired session: once kazoo has a new one, re-create our node in
        it and read the assignments again (nimbus may have moved our containers)."""
        if not self.state.connected:
            return
        self._watch_session(connected=False)  # whatever kazoo said before: we had no session
        with self._procs_lock:
            self._forget_stopped()
        self._lost.clear()
        try:
            failed = self.state.reopen()
        except Exception as e:  # noqa: BLE001 - ZooKeeper went away again: next step retries
            log.warning("cannot open a new ZooKeeper session yet: %s", e)
            self._lost.set()
            return
        self.registered = f"supervisors/{self.id}" not in failed
        log.info("new ZooKeeper session%s; reading the assignments again",
                 "" if self.registered else f" (supervisors/{self.id} is held by another session)")
        self._next_sync = 0.0

    def _sync_safely(self):
        asked = time.monotonic()
        try:
            if not self.registered:
                self.register()
            self.sync()
            if not self.state.lost:  # answered in our session (not a new one before reopen)
                with self._procs_lock:
                    self._guard.alive(asked)
            if self._zk_trouble:
                log.info("reading assignments again; %d topologies here", len(self.running))
                self._zk_trouble = False
        except Exception as e:  # noqa: BLE001 - keep supervising what runs
            if not self._zk_trouble:
                log.warning("cannot read the assignments (%s: %s); the containers here keep running",
                            type(e).__name__, e, exc_info=not isinstance(e, (ConnectionError, TimeoutError)))
                self._zk_trouble = True

    def sync(self):
        """Make what runs here match the assignments."""
        self.token = self.read_token() or self.token
        wanted = {}
        for name in self.state.children("assignments"):
            asg = self.state.get(f"assignments/{name}")
            own = own_containers(asg, self.id)
            if own:
                wanted[name] = (asg, own)
        for name in [n for n in self.running if n not in wanted]:
            log.info("%s is no longer assigned here: stopping its containers", name)
            gone = self.stop_topology(name, forget=True)
            if all(r.digest != gone.digest for r in self.running.values()):
                shutil.rmtree(self._path("code", gone.digest), ignore_errors=True)
        for name, (asg, own) in sorted(wanted.items()):
            self.ensure(name, asg, own)
        self.failed = {k: v for k, v in self.failed.items() if k[0] in wanted}
        self.waiting = {k: v for k, v in self.waiting.items() if k in wanted}

    def ensure(self, name, asg, own):
        version = version_of(asg)
        cur = self.running.get(name)
        if cur is not None and cur.version == version and cur.containers == own:
            return
        failure = self.failed.get((name, version))
        if failure is not None:
            if not failure["reported"]:
                self._report_failure(name, version, failure)
            return
        if cur is not None:
            if self.update_in_place(name, cur, asg, own, version):
                return
            log.info("%s: assignment version %s -> %s: restarting containers %s here",
                     name, cur.version, version, own)
            self.stop_topology(name)
        try:
            self.start_topology(name, asg, own, version)
            self.waiting.pop(name, None)
        except Pending as e:
            self._wait(name, f"waiting: {e}", logging.INFO)
        except (KazooException, ConnectionError, TimeoutError):
            raise  # ZooKeeper trouble: the next poll tries again
        except OSError as e:  # this host's trouble (disk, processes), not the topology's
            self._wait(name, f"cannot start its containers here yet: {e}")
        except Exception as e:  # noqa: BLE001 - bad archive or plan: report, do not retry
            line = " ".join(f"topology {name!r} cannot start on supervisor {self.id}: {e}".split())
            failure = {"line": line, "traceback": traceback.format_exc(), "reported": False}
            self.failed[(name, version)] = failure
            log.error("%s (assignment version %s; not retried)", line, version)
            self._report_failure(name, version, failure)

    def _wait(self, name, why, level=logging.WARNING):
        """Log once why ``name`` cannot start yet; the next poll tries again."""
        if self.waiting.get(name) != why:
            log.log(level, "%s: %s", name, why)
            self.waiting[name] = why

    def _report_failure(self, name, version, failure):
        """``status/NAME`` FAILED, shaped as the topology master writes it."""
        self.state.put(f"status/{name}", {
            "phase": "FAILED", "error": {"error": failure["line"], "traceback": failure["traceback"]},
            "active": False, "tmaster": None, "pid": None, "updated": time.time(), "host": self.host,
            "supervisor": self.id, "version": version})
        failure["reported"] = True

    # -- one topology ---------------------------------------------------------------------
    def fetch_code(self, digest):
        """The extracted archive ``DATA/code/DIGEST`` (fetched and checked once)."""
        if not isinstance(digest, str) or not DIGEST_RE.match(digest):
            raise AssignmentError(f"bad code digest {digest!r}")
        dest = self._path("code", digest)
        if os.path.isdir(dest):  # extract() renames a complete, verified tree into place
            return dest
        data = self.state.get_bytes(f"code/{digest}")
        if data is None:
            raise Pending(f"code archive {digest[:12]} is not in ZooKeeper yet")
        archive.extract(data, dest, digest=digest)
        log.info("code archive %s extracted (%d bytes)", digest[:12], len(data))
        return dest

    def start_topology(self, name, asg, own, version):
        rec = self.state.get(f"topologies/{name}")
        if rec is None:
            raise Pending(f"no topologies/{name} record yet")
        digest, entry = code_of(rec)
        topology_file = entry_path(self.fetch_code(digest), entry)
        run_dir = self._path("run", name)
        ipc = ipc_dir(self._ipc_sub)
        try:
            plan, own = build_plan(name, rec, asg, self.id, self.data_dir, topology_file, ipc, self.state_url,
                                   own_secret=self.keypair[1])
            os.makedirs(self._path("run"), mode=0o700, exist_ok=True)
            shutil.rmtree(run_dir, ignore_errors=True)
            os.makedirs(run_dir, mode=0o700)
            plan_path = os.path.join(run_dir, "plan.json")
            plan.save(plan_path)  # mkstemp + rename: 0600
            os.chmod(plan_path, 0o600)
            group = ProcessGroup(plan, plan_path, own, 0 in own, home=self.data_dir, fencing=True,
                                 tmaster_env=self._tmaster_env())
        except BaseException:
            shutil.rmtree(ipc, ignore_errors=True)
            raise
        self.running[name] = Running(name, version, own, digest, group, run_dir, ipc, asg)
        try:
            self._fresh_logs(name, rec)
            group.start()
        except BaseException:
            self.stop_topology(name)
            raise
        log.info("%s v%s: started containers %s (%d processes%s)", name, version, own, len(group.procs),
                 ", with the topology master" if 0 in own else "")

    def _tmaster_env(self):
        """The ZooKeeper credentials, for the topology master alone (bittern/zkauth.py)."""
        return {zkauth.ENV_AUTH: self.auth} if self.auth else None

    def update_in_place(self, name, cur, asg, own, version):
        """Carry a new assignment version without restarting the containers here that
        kept their slot: rewrite the plan at the same path, start what moved here,
        stop what moved away, SIGHUP the kept stream managers. False when the change
        is not of that kind (other packing or code, nothing kept): restart instead."""
        old = cur.asg or {}
        if old.get("packing") != asg.get("packing") or \
                set(old.get("containers") or {}) != set(asg.get("containers") or {}):
            return False
        kept = [c for c in own if c in cur.containers
                and old["containers"][str(c)] == asg["containers"][str(c)]]
        rec = self.state.get(f"topologies/{name}")
        if not kept or rec is None or code_of(rec)[0] != cur.digest:
            return False
        topology_file = entry_path(self.fetch_code(cur.digest), code_of(rec)[1])
        plan, own = build_plan(name, rec, asg, self.id, self.data_dir, topology_file, cur.ipc, self.state_url,
                              own_secret=self.keypair[1])
        path = cur.group.plan_path
        plan.save(path)
        os.chmod(path, 0o600)
        group = ProcessGroup(plan, path, own, 0 in own, home=self.data_dir, fencing=True,
                             tmaster_env=self._tmaster_env())
        moved_away = []
        for key, p in cur.group.procs.items():
            if key in group.procs and cur.group.container_of(key) in kept:
                group.procs[key] = p  # keeps running
            else:
                moved_away.append(p)
        stop_pids([p.pid for p in moved_away if p.alive()], cur.group.conf["bittern.shutdown.timeout.secs"])
        for p in moved_away:
            if p.popen:
                p.popen.wait()
        started = [p for p in group.procs.values() if p.popen is None]
        for p in started:
            p.start()
        for c in kept:
            p = group.procs.get(("stmgr", c))
            if p is not None and p.alive():
                os.kill(p.pid, signal.SIGHUP)
        cur.version, cur.containers, cur.group, cur.asg = version, own, group, asg
        log.info("%s: assignment version %s: containers %s kept running (plan re-read), %d processes "
                 "started for %s, %d stopped", name, version, kept, len(started),
                 sorted(set(own) - set(kept)) or "none", len(moved_away))
        return True

    def stop_topology(self, name, forget=False, quiet=False):
        """Stop its processes and remove its plan (``forget``: its whole run dir);
        ``quiet``: the caller logs why."""
        r = self.running.pop(name)
        r.group.shutdown()
        shutil.rmtree(r.ipc, ignore_errors=True)
        shutil.rmtree(self._path("run", name) if forget else r.run_dir, ignore_errors=True)
        if not quiet:
            log.info("%s v%s: containers %s stopped", name, r.version, r.containers)
        return r

    def _fresh_logs(self, name, rec):
        """A new submission of a topology starts with empty log files (as ``bittern
        run`` does locally); its new versions and restarts append to them."""
        ldir = self._path("logs", name)
        marker = os.path.join(ldir, ".submitted")
        mark = repr(rec.get("submitted_at"))
        try:
            with open(marker) as f:
                if f.read() == mark:
                    return
        except OSError:
            pass
        os.makedirs(ldir, mode=0o700, exist_ok=True)
        for n in os.listdir(ldir):
            if n.endswith(".log"):
                os.unlink(os.path.join(ldir, n))
        with open(marker, "w") as f:
            f.write(mark)

    # -- shutdown -------------------------------------------------------------------------
    def shutdown(self):
        self.stopping = True
        if self._watchdog is not None:
            self._watchdog.join()
            self._watchdog = None
        if self.running:
            stop_groups([r.group for r in self.running.values()])
            for name in list(self.running):
                self.stop_topology(name, forget=True)
        if self.logserver is not None:
            self.logserver.stop()
            self.logserver = None
        if self.state is not None:
            try:
                if self.registered and self.state.connected and not self._lost.is_set():
                    self.state.delete(f"supervisors/{self.id}")
            except Exception as e:  # noqa: BLE001 - the session's end removes it anyway
                log.warning("could not delete supervisors/%s: %s", self.id, e)
            self.state.close()
            self.state = None
        if self._lock_fd is not None:
            shutil.rmtree(ipc_base(self._ipc_sub), ignore_errors=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._up:
            log.info("supervisor %s stopped", self.id)
            self._up = False
