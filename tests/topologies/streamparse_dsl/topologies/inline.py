"""A component class defined in the topology file itself."""
from streamparse import Bolt, Topology

from dsl_components import Source


class Here(Bolt):
    outputs = ["x"]


class Inline(Topology):
    source = Source.spec()
    here = Here.spec(inputs=[source])
