"""Bad input: the spout class exists only inside the __main__ block, so Bittern's
instances (which import this file as a module) could never build it."""
from heronpy.api.stream import Grouping
from heronpy.api.topology import TopologyBuilder

from heron_components import CountBolt, WordSpout

if __name__ == '__main__':
    class HiddenSpout(WordSpout):
        pass

    builder = TopologyBuilder("bad_main_class")
    words = builder.add_spout("hidden_words", HiddenSpout, par=1)
    builder.add_bolt("count", CountBolt, par=1, inputs={words: Grouping.fields('word')})
    builder.build_and_submit()
