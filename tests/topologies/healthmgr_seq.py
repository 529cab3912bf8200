"""The health manager's end-to-end target: a spout at a fixed rate into a bolt that
does about a third of it per task.

spout (par 1) -shuffle-> work (par 1 at submission) -shuffle-> sink (par 1)

The spout (steady pace, ids logged so nothing is lost across restarts) and the bolt
(``test.work.ms`` per tuple; ``test.slow.index``: one slow instance until restarted)
are healthmgr_kit.py's; ``sink`` appends each id to ``<test.out>/sink-<task>.txt``.
"""
from bittern import Topology

from healthmgr_kit import RateSpout, WorkBolt
from testkit import LineSinkBolt


class HealthSeq(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.message.timeout.secs": 30,
              "topology.metrics.interval.secs": 1}
    spout = RateSpout.spec(par=1)
    work = WorkBolt.spec(par=1, inputs=[spout])
    sink = LineSinkBolt.spec(par=1, inputs=[work])
