from streamparse import ShellBolt, Topology

from dsl_components import Source


class BadNotABolt(Topology):
    source = Source.spec()
    odd = ShellBolt.spec(command="streamparse_run", script="dsl_components.NotAComponent", inputs=[source])
