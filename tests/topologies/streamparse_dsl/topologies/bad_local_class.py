from streamparse import Bolt, Topology

from dsl_components import Source


def make():
    class Local(Bolt):
        outputs = ["x"]
    return Local


class BadLocalClass(Topology):
    source = Source.spec()
    local = make().spec(inputs=[source])
