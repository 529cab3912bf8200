"""Testing your topologies (see the README's "Testing your topologies").

* :func:`complete_topology`: a whole topology run to completion in one process,
  deterministically, with spouts replaced by given tuples (Storm's
  ``Testing.completeTopology``).
* :class:`BoltHarness` / :class:`SpoutHarness`: one component driven tuple by tuple,
  with processing time, watermarks, ticks and timers under the test's control (Flink's
  operator test harnesses).
* ``pytest -p bittern.testing.pytest_plugin``: the ``bittern_run`` fixture runs a
  topology in real processes under a private ``BITTERN_HOME`` and fails the test if a
  process is left behind.

All of them run the engine's own instance code (instance/), not a re-implementation.
"""
from .harness import BoltHarness, SpoutHarness
from .local import Emit, MockedSpout, Result, complete_topology
from .plan import Emitted, ErrorRecord, TopologyTestError

__all__ = ["BoltHarness", "Emit", "Emitted", "ErrorRecord", "MockedSpout", "Result", "SpoutHarness",
           "TopologyTestError", "complete_topology"]
