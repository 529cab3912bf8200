"""The stream manager's side of fencing (see streammgr/fencing.py for the rule).

Mixed into :class:`streammgr.stmgr.StreamManager`, whose sockets and state it uses:

* what the tcp port reads is checked by :class:`streammgr.fencing.PeerIds` (in
  ``_on_inbound``); messages of an older copy of a peer are dropped and counted
  (``fenced``), and logged at most once a second;
* an instance whose registration names an older placement of this container than this
  stream manager's is told ``FENCED`` and not registered;
* ``FENCED`` from the topology master (this container was moved, this is the old copy):
  every local instance is told ``FENCED`` and sent SIGTERM, nothing more is forwarded,
  and the process exits with ``bittern.proc.EXIT_FENCED``, which its supervisor does
  not restart.
"""
from __future__ import annotations

import logging
import signal

from bittern.proc import signal_pids
from bittern.wire import Op

log = logging.getLogger("bittern.stmgr")


class FencedStop:
    fenced_by = None  # the FENCED message that stopped this stream manager

    def on_fenced(self, msg):
        """The topology master fenced this container: stop everything local, now."""
        if self.fenced_by is not None:
            return
        self.fenced_by = msg
        log.error("container %d was moved: this copy (placed at version %s) is fenced by a newer one "
                  "(version %s); stopping its instances and exiting", self.container,
                  self.fence.version(self.container), msg.get("newer"))
        pids = []
        for task, reg in self.registered.items():
            self.to_instance(task, Op.FENCED, container=self.container, placed=self.placed,
                             newer=msg.get("newer"))
            if reg.get("pid"):
                pids.append(reg["pid"])
        signal_pids(pids, signal.SIGTERM)  # (in case one is not reading its control socket)
        self.registered.clear()
        for key in list(self.queues.keys()):
            self.queues.drop(key)
        self.stopping = True

    def instance_fenced(self, task, msg):
        """True (and the instance told so) if a registering instance runs an older
        placement of this container than this stream manager."""
        theirs = msg.get("placed", self.placed)
        if not isinstance(theirs, int) or theirs >= self.placed:
            return False
        log.warning("task %s registered with placement version %s of container %d, older than this "
                    "stream manager's %d: told it is fenced", task, theirs, self.container, self.placed)
        self.to_instance(task, Op.FENCED, container=self.container, placed=theirs, newer=self.placed)
        return True

    def _fenced_peer(self, identity):
        self.counters["fenced"] += 1
        t = self._fenced_log
        if t.ready():
            log.warning("tcp port: dropped a message of %r, an older copy of a moved container (this plan "
                        "knows it at version %s; %d more since the last report, %d in all)", identity,
                        self.fence.version(int(identity[1:].partition(b"@")[0] or 0)), t.held,
                        self.counters["fenced"])
            t.held = 0
