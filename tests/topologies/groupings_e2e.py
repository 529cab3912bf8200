"""Every grouping at once, for tests/test_groupings_e2e.py (run with topology.stmgrs=2).

``src`` (2 tasks) emits each n in range(test.count) once on ``default``, and on
``evens`` or ``odds``. One recording bolt per grouping subscribes to ``default``;
``director`` re-sends what it gets to ``direct_sink`` over a direct stream;
``evens_sink``/``odds_sink``/``both_sink`` subscribe to the named streams;
``tick_bolt`` gets a tick tuple every second.
"""
from bittern import Grouping, Topology

from groupings_kit import DirectorBolt, GroupingSpout, ModuloGrouping, Recorder


class GroupingsE2E(Topology):
    config = {"topology.stmgrs": 2, "test.count": 1200, "test.keys": 13}

    src = GroupingSpout.spec(par=2)

    fields_sink = Recorder.spec(par=3, inputs={src: Grouping.fields("key")})
    all_sink = Recorder.spec(par=3, inputs={src: Grouping.ALL})
    global_sink = Recorder.spec(par=3, inputs={src: Grouping.GLOBAL})
    shuffle_sink = Recorder.spec(par=3, inputs={src: Grouping.SHUFFLE})
    none_sink = Recorder.spec(par=2, inputs={src: Grouping.NONE})
    local_sink = Recorder.spec(par=3, inputs={src: Grouping.LOCAL_OR_SHUFFLE})
    local_one = Recorder.spec(par=1, inputs={src: Grouping.LOCAL_OR_SHUFFLE})
    custom_cls = Recorder.spec(par=3, inputs={src: Grouping.custom(ModuloGrouping)})
    custom_obj = Recorder.spec(par=2, inputs={src: Grouping.custom(ModuloGrouping(offset=1))})
    pk_sink = Recorder.spec(par=3, inputs={src: Grouping.partial_key("key")})

    director = DirectorBolt.spec(par=2, inputs={src: Grouping.SHUFFLE},
                                 config={"test.direct.target": "direct_sink"})
    direct_sink = Recorder.spec(par=3, inputs={director["targeted"]: Grouping.DIRECT})

    evens_sink = Recorder.spec(par=2, inputs={src["evens"]: Grouping.SHUFFLE})
    odds_sink = Recorder.spec(par=2, inputs={src["odds"]: Grouping.fields("sq")})
    both_sink = Recorder.spec(par=1, inputs={src["evens"]: Grouping.SHUFFLE, src["odds"]: Grouping.GLOBAL})

    tick_bolt = Recorder.spec(par=1, inputs={src["evens"]: Grouping.GLOBAL},
                              config={"topology.tick.tuple.freq.secs": 1})
