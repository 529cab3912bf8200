"""The public topology API (re-exported by :mod:`bittern`)."""
from .component import Bolt, ComponentSpec, Spout, StreamRef
from .reliable import EXHAUSTED, ReliableSpout
from .stream import DEFAULT_STREAM, Grouping, GroupingSpec, Stream
from .topology import Topology, TopologyBuilder, TopologyDef
from .tuple import Tuple
from .windows import (AggregatingWindowBolt, Count, CountWindowBolt, Duration, EventTime, TupleWindow, Window,
                      WindowedBolt)

__all__ = ["EXHAUSTED", "Bolt", "ComponentSpec", "ReliableSpout", "Spout", "StreamRef", "DEFAULT_STREAM", "Grouping",
           "GroupingSpec", "Stream", "Topology", "TopologyBuilder", "TopologyDef", "Tuple",
           "AggregatingWindowBolt", "Count", "CountWindowBolt", "Duration", "EventTime", "TupleWindow", "Window",
           "WindowedBolt"]
