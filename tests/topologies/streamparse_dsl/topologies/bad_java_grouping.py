from streamparse import Grouping, Topology

from dsl_components import Route, Source


class BadJavaGrouping(Topology):
    source = Source.spec()
    custom = Route.spec(inputs={source: Grouping.custom_object("com.example.MyGrouping", [])})
