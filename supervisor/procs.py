"""The processes of one topology on this host: what to run, restarts, ordered stop.

A :class:`ProcessGroup` runs the part of a run plan that one supervisor owns: the
topology master (when container 0 is here), and the stream manager and the
instances of each of its containers. The local supervisor owns every container;
a cluster supervisor owns the containers an assignment gives its slots. A process
that dies is restarted after a backoff that grows with each quick death and
resets after a healthy run. Stopping goes instances first (their ``close()`` runs
while the stream managers still carry their last batches), then the stream
managers, then the topology master.

With ``fencing`` (cluster mode), a stream manager or topology master that exits with
``bittern.proc.EXIT_FENCED`` (a newer copy of its container runs elsewhere) is not
restarted: :meth:`ProcessGroup.check` adds its container to ``fenced`` and the
supervisor decides (supervisor/cluster.py). Without it (local mode) that exit is
one like any other.
"""
from __future__ import annotations

import logging
import os
import socket
import tempfile
import time

import psutil

from bittern import logs
from bittern.privdir import private_dir, private_runtime_dir
from bittern.proc import EXIT_FENCED, module_cmd, spawn, stop_pids

from .backoff import Backoff

log = logging.getLogger("bittern.supervisor")

STOP_ORDER = ("instance", "stmgr", "tmaster")
FENCED_KINDS = ("stmgr", "tmaster")  # the processes that exit with EXIT_FENCED
RSS_CHECK_SECS = 1.0


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ipc_base(sub=None):
    """Where ipc:// socket files go: a short path (theirs must stay < 107 bytes) in a
    directory only this user can enter (bittern/privdir.py: another user who made
    ``/tmp/bittern-<uid>`` first does not get our sockets); ``sub``: a subdirectory of
    one owner's, that it may clean up as a whole."""
    base = private_runtime_dir()
    return os.path.join(base, sub) if sub else base


def ipc_dir(sub=None):
    """A new directory (0700) for one topology's ipc:// socket files."""
    base = ipc_base(sub)
    if sub:
        private_dir(base, "ipc directory")
    return tempfile.mkdtemp(prefix="", dir=base)


class Proc:
    def __init__(self, key, cmd, log_path, conf, env=None, rss_limit_mb=0):
        self.key = key
        self.cmd = cmd
        self.rss_limit = int(rss_limit_mb) << 20  # 0: no limit
        self.log_path = log_path
        self.env = env
        self.popen = None
        self.started_at = 0.0
        self.restarts = 0
        self.memory_kills = 0
        self.restart_at = None
        self.fenced = False  # exited with EXIT_FENCED: not restarted
        self.backoff = Backoff(conf["bittern.restart.backoff.initial.secs"],
                               conf["bittern.restart.backoff.max.secs"],
                               conf["bittern.restart.backoff.reset.secs"])

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def start(self):
        self.popen = spawn(self.cmd, self.log_path, env=self.env)
        self.started_at = time.monotonic()
        self.restart_at = None
        self.fenced = False


class ProcessGroup:
    """The processes of ``containers`` of ``plan`` (saved at ``plan_path``), plus the
    topology master if ``with_tmaster``. Logs go to ``<home>/logs/<topology>/``;
    ``env`` is added to every child's environment, ``tmaster_env`` to the topology
    master's alone (the ZooKeeper credentials: never to user code). ``fencing``: a fenced exit
    (EXIT_FENCED) of a stream manager or the topology master is not restarted but
    reported in ``fenced`` (its containers)."""

    def __init__(self, plan, plan_path, containers, with_tmaster, conf=None, home=None, env=None,
                 fencing=False, tmaster_env=None):
        self.plan = plan
        self.plan_path = plan_path
        self.containers = sorted(containers)
        self.with_tmaster = with_tmaster
        self.conf = conf if conf is not None else plan.config
        self.home = home or plan.home
        self.env = env
        self.tmaster_env = tmaster_env
        self.fencing = fencing
        self.fenced = set()  # containers whose stream manager or topology master exited fenced
        self.procs = {}
        self._next_rss_check = 0.0
        self._build()

    def _add(self, key, cmd, log_path, rss_limit_mb=0, env=None):
        self.procs[key] = Proc(key, cmd, log_path, self.conf, {**(self.env or {}), **(env or {})} or None,
                               rss_limit_mb)

    def _build(self):
        plan, path = self.plan, self.plan_path
        ldir = logs.log_dir(self.home, plan.name)
        if self.with_tmaster:
            self._add(("tmaster", 0), module_cmd("streammgr.tmaster", "--plan", path),
                      os.path.join(ldir, "tmaster.log"), env=self.tmaster_env)
        for c in self.containers:
            self._add(("stmgr", c), module_cmd("streammgr", "--plan", path, "--container", c),
                      os.path.join(ldir, f"stmgr-{c}.log"))
            for t in plan.packing.containers[c]:
                comp = plan.packing.task_component[t]
                self._add(("instance", t), module_cmd("instance", "--plan", path, "--task", t),
                          logs.instance_log(self.home, plan.name, comp, t),
                          plan.component_config(comp).get("bittern.instance.memory.limit.mb", 0))

    def container_of(self, key):
        kind, n = key
        if kind == "instance":
            return self.plan.packing.task_container[n]
        return n

    def describe(self):
        """``{"kind-n": {pid, restarts, container}}`` for the state manager."""
        return {"%s-%s" % k: {"pid": p.pid, "restarts": p.restarts, "container": self.container_of(k)}
                for k, p in self.procs.items()}

    def pids(self):
        return [p.pid for p in self.procs.values() if p.alive()]

    def start(self):
        for p in self.procs.values():
            p.start()

    def check(self, stopping=False):
        """Restart what died (after its backoff); True if anything was restarted.
        Instances over their memory limit are killed first (and so restarted). With
        ``fencing``, a fenced exit is not restarted: its container goes into ``fenced``."""
        now = time.monotonic()
        if now >= self._next_rss_check:
            self._next_rss_check = now + RSS_CHECK_SECS
            self.enforce_memory()
        changed = False
        for p in self.procs.values():
            if p.fenced:
                continue
            if p.restart_at is not None:
                if now >= p.restart_at and not stopping:
                    p.start()
                    p.restarts += 1
                    changed = True
                    log.info("%s: restarted %s-%s (pid %d, restart #%d)", self.plan.name, *p.key,
                             p.pid, p.restarts)
                continue
            rc = p.popen.poll()
            if rc is None:
                continue
            if rc == EXIT_FENCED and self.fencing and p.key[0] in FENCED_KINDS:
                p.fenced = True
                self.fenced.add(self.container_of(p.key))
                continue
            ran = now - p.started_at
            delay = p.backoff.next_delay(ran)
            p.restart_at = now + delay
            log.warning("%s: %s-%s (pid %d) exited with %s after %.1fs; restarting in %.1fs",
                        self.plan.name, *p.key, p.pid, rc, ran, delay)
        return changed

    def enforce_memory(self):
        """``bittern.instance.memory.limit.mb`` (per component; 0: none): an instance whose
        RSS is over it is killed and restarted like any process that died, with the
        cause in the supervisor's log. RSS is watched rather than RLIMIT_AS set, because
        an address-space limit breaks processes that map much more than they touch (a
        JVM started by a PySpark spout, numpy's allocator)."""
        for p in self.procs.values():
            if not p.rss_limit or not p.alive():
                continue
            try:
                rss = psutil.Process(p.pid).memory_info().rss
            except psutil.NoSuchProcess:
                continue
            if rss > p.rss_limit:
                log.error("%s: %s-%s (pid %d) uses %d MB, over its limit of %d MB "
                          "(bittern.instance.memory.limit.mb): killed, it will be restarted",
                          self.plan.name, *p.key, p.pid, rss >> 20, p.rss_limit >> 20)
                p.popen.kill()
                p.popen.wait()
                p.memory_kills += 1

    def shutdown(self, timeout=None):
        stop_groups([self], timeout)


def stop_groups(groups, timeout=None):
    """Stop several groups together, kind by kind (all instances, then all stream
    managers, then the topology masters), and reap every child."""
    if timeout is None:
        timeout = max([g.conf["bittern.shutdown.timeout.secs"] for g in groups] or [5.0])
    for kind in STOP_ORDER:
        pids = [p.pid for g in groups for k, p in g.procs.items() if k[0] == kind and p.alive()]
        left = stop_pids(pids, timeout)
        if left:
            log.warning("%s processes %s did not stop in %.0fs; killed", kind, left, timeout)
    for g in groups:
        for p in g.procs.values():
            if p.popen:
                p.popen.wait()
