"""What makes an in-process run deterministic: a virtual clock and a seeded random
number generator, put in place of ``time`` and ``random`` in the engine's own modules
(instance/, and the sinks' group timer) while a harness or ``complete_topology`` runs
engine code, and put back afterwards.

The engine code itself is unchanged: it still calls ``time.monotonic()``,
``time.time()``, ``random.randrange`` and ``random.getrandbits`` as it does in a
process; here those names answer from the clock and generator of the run. User code
keeps the real ``time`` and ``random`` modules.
"""
from __future__ import annotations

import importlib
import itertools
import random
import sys
import time as _time

# modules whose global ``time`` is the engine's clock
CLOCKED = ("instance.runtime", "instance.bolt", "instance.spout", "instance.emitter",
           "instance.timekeeping", "instance.windowing", "bittern.sinks.base")


class VirtualClock:
    """Stands in for the ``time`` module: ``monotonic()`` and ``time()`` move only when
    :meth:`advance` is called (together: processing time is one clock). Everything else
    (``strftime``, ``sleep``...) is the real module's."""

    def __init__(self, start=0.0):
        self.wall = float(start)
        self.mono = 0.0

    def monotonic(self):
        return self.mono

    perf_counter = monotonic

    def time(self):
        return self.wall

    def advance(self, seconds):
        if seconds < 0:
            raise ValueError(f"time cannot go backwards (advance by {seconds!r})")
        self.mono += seconds
        self.wall += seconds

    def __getattr__(self, name):
        return getattr(_time, name)


class Sandbox:
    """``with sandbox:`` runs engine code on the virtual clock and the seeded generator
    (re-entrant). Build every instance inside it: a shuffle grouping draws its start
    when it is made."""

    def __init__(self, seed=0, start_time=0.0):
        self.clock = VirtualClock(start_time)
        self.rng = random.Random(seed)
        self._depth = 0
        self._saved = []

    def __enter__(self):
        if self._depth == 0:
            import instance.acking
            import instance.grouping
            import instance.spout
            saved = []
            for name in CLOCKED:
                mod = sys.modules.get(name) or importlib.import_module(name)
                saved.append((mod, "time", mod.time))
                mod.time = self.clock
            saved.append((instance.grouping, "random", instance.grouping.random))
            instance.grouping.random = self.rng
            saved.append((instance.acking, "_getrandbits", instance.acking._getrandbits))
            instance.acking._getrandbits = self.rng.getrandbits
            self._saved = saved
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for mod, attr, val in reversed(self._saved):
                setattr(mod, attr, val)
            self._saved = []
        return False

    def now(self):
        return self.clock.mono


# Classes the testing tools make (mocked spouts, the sources that feed a harnessed
# bolt) are looked up by instances as "bittern.testing.sandbox:<name>", as every
# component class is by its "module:qualname".
_made = {}
_serial = itertools.count()


def register_class(cls):
    """Make ``cls`` importable by its class path; returns the path."""
    name = f"_bittern_testing_{next(_serial)}_{cls.__name__}"
    cls.__qualname__ = cls.__name__ = name
    cls.__module__ = __name__
    _made[name] = cls
    globals()[name] = cls
    return f"{__name__}:{name}"


def unregister_class(path):
    name = path.partition(":")[2]
    _made.pop(name, None)
    globals().pop(name, None)
