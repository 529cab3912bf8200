from streamparse import ShellBolt, Topology

from dsl_components import Source


class BadMissing(Topology):
    source = Source.spec()
    ghost = ShellBolt.spec(command="streamparse_run", script="bolts.nowhere.GhostBolt", inputs=[source])
