"""The health manager's end-to-end pipeline: two bolts that each fall short of the
spout's rate with one task (healthmgr_kit.py's components).

spout (par 1) -shuffle-> work (par 1) -shuffle-> more (par 1) -shuffle-> sink (par 1)

``work`` waits ``test.work.ms`` per tuple, ``more`` ``test.more.ms``; ``sink`` appends
each id to ``<test.out>/sink-<task>.txt``. With ``work`` the bottleneck, ``more`` sees
only what ``work`` lets through and causes no backpressure itself: only the true-rate
model (the demand propagated from the spout) knows that it is short too.
"""
from bittern import Topology

from healthmgr_kit import RateSpout, WorkBolt
from testkit import LineSinkBolt


class HealthPipe(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.message.timeout.secs": 30,
              "topology.metrics.interval.secs": 1}
    spout = RateSpout.spec(par=1)
    work = WorkBolt.spec(par=1, inputs=[spout])
    more = WorkBolt.spec(par=1, inputs=[work])
    sink = LineSinkBolt.spec(par=1, inputs=[more])
