"""Bittern: Storm/Heron-style stream processing in Python, one process per task."""
from .api import (DEFAULT_STREAM, EXHAUSTED, AggregatingWindowBolt, Bolt, ComponentSpec, Count, CountWindowBolt,
                  Duration, EventTime, Grouping, ReliableSpout, Spout, Stream, Topology, TopologyBuilder, TopologyDef,
                  Tuple, TupleWindow, Window, WindowedBolt)
from .multilang import ShellBolt, ShellSpout

__version__ = "0.1.0"
__all__ = ["DEFAULT_STREAM", "EXHAUSTED", "Bolt", "ComponentSpec", "Grouping", "ReliableSpout", "Spout", "Stream", "ShellBolt", "ShellSpout",
           "Topology", "TopologyBuilder", "TopologyDef", "Tuple", "__version__", "AggregatingWindowBolt", "Count",
           "CountWindowBolt", "Duration", "EventTime", "TupleWindow", "Window", "WindowedBolt"]
