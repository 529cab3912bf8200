"""The health manager's hot-key topology (healthmgr_kit.py's components): most ids
carry the key ``"hot"`` (``test.hot.percent`` of every 100), grouped by key, so one
task of ``work`` gets them all and is the bottleneck while its peers idle. More tasks
do not split a key: the health manager must report data skew, not scale.

spout (par 1) -fields(key)-> work (par 3) -shuffle-> sink (par 1)
"""
from bittern import Grouping, Topology

from healthmgr_kit import RateSpout, WorkBolt
from testkit import LineSinkBolt


class HealthSkew(Topology):
    config = {"topology.reliability.mode": "ATLEAST_ONCE", "topology.message.timeout.secs": 30,
              "topology.metrics.interval.secs": 1}
    spout = RateSpout.spec(par=1)
    work = WorkBolt.spec(par=3, inputs={spout: Grouping.fields("key")})
    sink = LineSinkBolt.spec(par=1, inputs=[work])
