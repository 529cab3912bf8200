"""The local supervisor: runs every container of one topology on this machine.

Started by ``bittern run`` (in the foreground, dying with it) or ``bittern submit``
(detached). It reads the topology and its packing from the state manager,
allocates endpoints, writes the run plan, starts the topology master, one stream
manager per container and one process per task, restarts any of them that dies
(with backoff, logged, counted). On SIGHUP (``bittern rebalance``, bittern/rebalance.py)
it stops them all and starts them again on the definition and packing now in the
state manager; ``processes/NAME`` then carries the assignment's ``version``. On
SIGTERM it stops them all — instances first,
so their ``close()`` runs while the stream managers still carry their last
batches — and removes the topology's state.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import time

from bittern.api.topology import TopologyDef
from bittern.packing import PackingPlan
from bittern.proc import ParentWatch
from bittern.runplan import RunPlan

from .procs import ProcessGroup, ipc_dir

log = logging.getLogger("bittern.supervisor")

__all__ = ["LocalSupervisor", "ipc_dir"]


class LocalSupervisor:
    def __init__(self, state, name, home, keep_state=False, detached=False):
        self.state = state
        self.name = name
        self.home = home
        self.keep_state = keep_state
        self.stopping = False
        self.group = None
        self._parent = None if detached else ParentWatch()
        self._ipc = None
        self._gen = 0
        self.replan_wanted = False
        self.plan = None

    def make_plan(self):
        rec = self.state.topology(self.name)
        asg = self.state.assignment(self.name)
        if rec is None or asg is None:
            raise RuntimeError(f"topology {self.name!r} has no record or assignment in the state manager")
        tdef = TopologyDef.from_dict(rec["definition"])
        packing = PackingPlan.from_dict(asg["packing"])
        # Local mode has one host, so every endpoint is an ipc:// socket in a directory only
        # this user can enter (0700, bittern/privdir.py): no other local user can connect to
        # the topology master, a stream manager or an instance socket (a tcp port on
        # 127.0.0.1 admits every local user). The peer endpoint keeps its "tcp" key.
        if self._ipc is None:
            self._ipc = ipc_dir()
        self._gen += 1
        gen = os.path.join(self._ipc, f"g{self._gen}")  # this plan's; a re-plan removes it
        os.mkdir(gen, 0o700)
        stmgrs = {c: {"tcp": f"ipc://{gen}/p{c}", "ipc": f"ipc://{gen}/c{c}", "ctl": f"ipc://{gen}/k{c}"}
                  for c in packing.containers}
        # a re-plan keeps the topology master's endpoint, so clients that hold it (`bittern run`)
        # reach the new one
        tmaster = f"ipc://{self._ipc}/tm"
        plan = RunPlan(self.name, self.home, tdef, packing, tmaster, stmgrs, rec["config"])
        self.plan_path = os.path.join(self.home, "run", self.name, "plan.json")
        plan.save(self.plan_path)
        asg.update({"tmaster": plan.tmaster, "stmgrs": {str(c): e for c, e in stmgrs.items()},
                    "supervisor": os.getpid(), "plan": self.plan_path})
        self.state.put(f"assignments/{self.name}", asg)
        return plan

    def record(self):
        asg = self.state.assignment(self.name) or {}
        self.state.put(f"processes/{self.name}", {"supervisor": os.getpid(), "procs": self.group.describe(),
                                                  "version": asg.get("version", 0)})

    def run(self):
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hup)
        self.start_group()
        try:
            while not self.stopping:
                time.sleep(0.1)
                if self._parent is not None and self._parent.orphaned():
                    log.warning("parent process is gone; stopping the topology")
                    break
                if self.replan_wanted:
                    self.replan()
                self.check()
        finally:
            self.shutdown()

    def start_group(self):
        self.plan = plan = self.make_plan()
        self.group = ProcessGroup(plan, self.plan_path, plan.packing.containers, True, home=self.home)
        self.group.start()
        self.record()
        log.info("supervising %s: %d processes", self.name, len(self.group.procs))

    def replan(self):
        """Stop every process, then start them on the plan now in the state manager.
        ``status/NAME`` is removed in between, so whoever waits for the new plan
        never reads the old topology master's status."""
        self.replan_wanted = False
        log.info("%s: re-planning (new definition or packing): stopping %d processes", self.name,
                 len(self.group.procs))
        self.group.shutdown()
        self.group = None
        if self._ipc:
            shutil.rmtree(os.path.join(self._ipc, f"g{self._gen}"), ignore_errors=True)
        self.state.delete(f"status/{self.name}")
        self.start_group()

    def _on_signal(self, signum, frame):
        self.stopping = True

    def _on_hup(self, signum, frame):
        self.replan_wanted = True

    def check(self):
        if self.group.check(self.stopping):
            self.record()

    def shutdown(self):
        if self.group is not None:
            self.group.shutdown()
        if self._ipc:
            shutil.rmtree(self._ipc, ignore_errors=True)
        if not self.keep_state:
            self.state.remove_topology(self.name)
            shutil.rmtree(os.path.join(self.home, "run", self.name), ignore_errors=True)
        log.info("topology %s stopped", self.name)
