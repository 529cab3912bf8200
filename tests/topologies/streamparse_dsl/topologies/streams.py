"""Every DSL shape the translation handles: named and direct streams, each grouping,
list inputs, shell components, a streamparse_run script with -s, per-env par, config."""
from streamparse import Grouping, ShellBolt, Topology

from dsl_components import DirectOnly, Route, Source


class Streams(Topology):
    config = {
        "topology.acker.executors": 0,
        "topology.tick.tuple.freq.secs": 2,
        "topology.max.spout.pending": 10,
        "topology.message.timeout.secs": 5,
        "topology.workers": 2,
        "topology.worker.childopts": "-Xmx1g",
        "topology.no.such.thing": 1,
        "storm.zookeeper.servers": ["zk1"],
        "pystorm.log.level": "debug",
        "my.key": "v",
    }
    source = Source.spec(par=2)
    direct_only = DirectOnly.spec()
    by_word = Route.spec(inputs={source["words"]: Grouping.fields("word"), source: Grouping.GLOBAL},
                         par={"prod": 3, "beta": 1}, config={"topology.tick.tuple.freq.secs": 1,
                                                           "topology.no.such.thing": 2})
    picked = Route.spec(inputs={source["picked"]: Grouping.DIRECT})
    auto_direct = Route.spec(inputs=[direct_only])
    shuffled = Route.spec(inputs=[by_word, picked])
    everyone = Route.spec(inputs={by_word: Grouping.ALL, picked: Grouping.NONE,
                                  auto_direct: Grouping.LOCAL_OR_SHUFFLE})
    split = ShellBolt.spec(command="python3", script="split.py", inputs=[source], outputs=["word"])
    wrapped = ShellBolt.spec(command="streamparse_run", script="-s msgpack dsl_components.Route",
                             inputs=[split], outputs=["x"])
