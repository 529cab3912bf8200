"""Storm's exclamation topology: words -> "word!!!" -> "word!!!!!!".

    bittern run topologies/exclamation.py --duration 10
"""
from bittern import Bolt, Spout, TopologyBuilder

WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]


class WordSpout(Spout):
    outputs = ["word"]

    def initialize(self, config, context):
        self.i = 0
        self.limit = int(config.get("exclamation.words", 0))  # 0: no limit

    def next_tuple(self):
        if self.limit and self.i >= self.limit:
            return
        self.emit([WORDS[self.i % len(WORDS)]], tup_id=self.i)
        self.i += 1


class ExclamationBolt(Bolt):
    outputs = ["word"]

    def initialize(self, config, context):
        self.print_every = int(config.get("exclamation.print.every", 0))
        self.n = 0

    def process(self, tup):
        word = tup.values[0] + "!!!"
        self.emit([word])
        self.n += 1
        if self.print_every and self.n % self.print_every == 0:
            print(word)


builder = TopologyBuilder("exclamation")
word = builder.add_spout("word", WordSpout, par=2)
exclaim1 = builder.add_bolt("exclaim1", ExclamationBolt, par=3, inputs=[word])
exclaim2 = builder.add_bolt("exclaim2", ExclamationBolt, par=2, inputs=[exclaim1],
                            config={"exclamation.print.every": 100000})
builder.set_config({"topology.stmgrs": 2})
