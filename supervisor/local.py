"""The local supervisor: runs every container of one topology on this machine.

Started by ``bittern run`` (in the foreground, dying with it) or ``bittern submit``
(detached). It reads the topology and its packing from the state manager,
allocates endpoints, writes the run plan, starts the topology master, one stream
manager per container and one process per task, restarts any of them that dies
(with backoff, logged, counted), and on SIGTERM stops them all — instances first,
so their ``close()`` runs while the stream managers still carry their last
batches — and removes the topology's state.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import time

from bittern import logs
from bittern.api.topology import TopologyDef
from bittern.packing import PackingPlan
from bittern.proc import ParentWatch, module_cmd, spawn, stop_pids
from bittern.runplan import RunPlan

from .backoff import Backoff

log = logging.getLogger("bittern.supervisor")


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ipc_dir():
    """A short directory for ipc:// socket files (their paths must stay < 107 bytes)."""
    base = os.path.join(tempfile.gettempdir(), f"bittern-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return tempfile.mkdtemp(prefix="", dir=base)


class Proc:
    def __init__(self, key, cmd, log_path, conf):
        self.key = key
        self.cmd = cmd
        self.log_path = log_path
        self.popen = None
        self.started_at = 0.0
        self.restarts = 0
        self.restart_at = None
        self.backoff = Backoff(conf["bittern.restart.backoff.initial.secs"],
                               conf["bittern.restart.backoff.max.secs"],
                               conf["bittern.restart.backoff.reset.secs"])

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def start(self):
        self.popen = spawn(self.cmd, self.log_path)
        self.started_at = time.monotonic()
        self.restart_at = None


class LocalSupervisor:
    def __init__(self, state, name, home, keep_state=False, detached=False):
        self.state = state
        self.name = name
        self.home = home
        self.keep_state = keep_state
        self.stopping = False
        self.procs = {}
        self._parent = None if detached else ParentWatch()
        self._ipc = None

    def make_plan(self):
        rec = self.state.topology(self.name)
        asg = self.state.assignment(self.name)
        if rec is None or asg is None:
            raise RuntimeError(f"topology {self.name!r} has no record or assignment in the state manager")
        tdef = TopologyDef.from_dict(rec["definition"])
        packing = PackingPlan.from_dict(asg["packing"])
        self._ipc = ipc_dir()
        stmgrs = {c: {"tcp": f"tcp://127.0.0.1:{free_port()}", "ipc": f"ipc://{self._ipc}/c{c}",
                      "ctl": f"ipc://{self._ipc}/k{c}"}
                  for c in packing.containers}
        plan = RunPlan(self.name, self.home, tdef, packing, f"tcp://127.0.0.1:{free_port()}", stmgrs,
                       rec["config"])
        self.plan_path = os.path.join(self.home, "run", self.name, "plan.json")
        plan.save(self.plan_path)
        asg.update({"tmaster": plan.tmaster, "stmgrs": {str(c): e for c, e in stmgrs.items()},
                    "supervisor": os.getpid(), "plan": self.plan_path})
        self.state.put(f"assignments/{self.name}", asg)
        return plan

    def build_procs(self, plan):
        ldir = logs.log_dir(self.home, self.name)
        conf = plan.config
        self.procs[("tmaster", 0)] = Proc(("tmaster", 0), module_cmd("streammgr.tmaster", "--plan", self.plan_path),
                                          os.path.join(ldir, "tmaster.log"), conf)
        for c, tasks in sorted(plan.packing.containers.items()):
            self.procs[("stmgr", c)] = Proc(("stmgr", c),
                                            module_cmd("streammgr", "--plan", self.plan_path, "--container", c),
                                            os.path.join(ldir, f"stmgr-{c}.log"), conf)
            for t in tasks:
                comp = plan.packing.task_component[t]
                self.procs[("instance", t)] = Proc(("instance", t),
                                                   module_cmd("instance", "--plan", self.plan_path, "--task", t),
                                                   logs.instance_log(self.home, self.name, comp, t), conf)

    def record(self):
        self.state.put(f"processes/{self.name}", {
            "supervisor": os.getpid(),
            "procs": {"%s-%s" % k: {"pid": p.pid, "restarts": p.restarts,
                                     "container": self._container_of(k)}
                      for k, p in self.procs.items()}})

    def _container_of(self, key):
        kind, n = key
        if kind == "instance":
            return self.plan.packing.task_container[n]
        return n

    def run(self):
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.plan = plan = self.make_plan()
        self.build_procs(plan)
        for p in self.procs.values():
            p.start()
        self.record()
        log.info("supervising %s: %d processes", self.name, len(self.procs))
        try:
            while not self.stopping:
                time.sleep(0.1)
                if self._parent is not None and self._parent.orphaned():
                    log.warning("parent process is gone; stopping the topology")
                    break
                self.check()
        finally:
            self.shutdown()

    def _on_signal(self, signum, frame):
        self.stopping = True

    def check(self):
        now = time.monotonic()
        changed = False
        for p in self.procs.values():
            if p.restart_at is not None:
                if now >= p.restart_at and not self.stopping:
                    p.start()
                    p.restarts += 1
                    changed = True
                    log.info("restarted %s-%s (pid %d, restart #%d)", *p.key, p.pid, p.restarts)
                continue
            rc = p.popen.poll()
            if rc is None:
                continue
            ran = now - p.started_at
            delay = p.backoff.next_delay(ran)
            p.restart_at = now + delay
            log.warning("%s-%s (pid %d) exited with %s after %.1fs; restarting in %.1fs",
                        *p.key, p.pid, rc, ran, delay)
        if changed:
            self.record()

    def shutdown(self):
        timeout = self.plan.config["bittern.shutdown.timeout.secs"] if hasattr(self, "plan") else 5.0
        order = ("instance", "stmgr", "tmaster")
        for kind in order:
            pids = [p.pid for k, p in self.procs.items() if k[0] == kind and p.popen and p.popen.poll() is None]
            left = stop_pids(pids, timeout)
            if left:
                log.warning("%s processes %s did not stop in %.0fs; killed", kind, left, timeout)
        for p in self.procs.values():
            if p.popen:
                p.popen.wait()
        if self._ipc:
            shutil.rmtree(self._ipc, ignore_errors=True)
        if not self.keep_state:
            self.state.remove_topology(self.name)
            shutil.rmtree(os.path.join(self.home, "run", self.name), ignore_errors=True)
        log.info("topology %s stopped", self.name)


