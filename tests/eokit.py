"""What the exactly-once end-to-end tests check, shared by tests/test_exactly_once.py
and tests/test_rebalance_eo.py (both run tests/topologies/exactly_once_seq.py, whose
sink commits ``[number, key, running count of key]`` rows)."""
from __future__ import annotations

import glob
import json
import os
import signal
from collections import Counter


def kill9(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def set_gate(path, n):
    """Let exactly_once_seq.py's spout (``test.gate=path``) emit the numbers below ``n``
    (None: all of them). Written whole (a rename), so the spout never reads half a number."""
    if n is None:
        if os.path.exists(path):
            os.unlink(path)
        return
    with open(path + ".tmp", "w") as f:
        f.write(f"{n}\n")
    os.replace(path + ".tmp", path)


class Gates:
    """The test's side of a spout's gate (tests/topologies/testkit.Gate) over ``n`` numbers
    in ``parts``: the first part let go at once, one more at each ``more()``, the last
    one (everything) at the last. ``config``: the submission's ``--config`` value."""

    def __init__(self, path, n, parts):
        self.path = str(path)
        self.config = f"test.gate={self.path}"
        self._next = iter([n * i // parts for i in range(2, parts)] + [None])
        set_gate(self.path, n // parts)

    def more(self):
        set_gate(self.path, next(self._next))


def checkpoint_metrics(bittern, name):
    """The topology master's "checkpoints" report (restores, completed, epoch...)."""
    from bittern.client import TMClient
    from bittern.wire import Op
    with TMClient(bittern.state("status", name)["tmaster"]) as client:
        return client.request(Op.GET_METRICS, window="1m").get("checkpoints")


def committed_rows(out):
    """Rows of the sink's committed files only (``seq-<checkpoint>-<task>.jsonl``)."""
    rows = []
    for path in glob.glob(os.path.join(out, "sink", "seq-*-*.jsonl")):
        try:
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:  # (committed files are never removed; defensive)
            pass
    return rows


def check_exactly_once(rows, n, keys):
    """Every number 0..n-1 committed once, and each key's running counts exactly
    1..|{x : x % keys == key}|, each once."""
    numbers = Counter(r[0] for r in rows)
    dups = {x: c for x, c in numbers.items() if c > 1}
    missing = set(range(n)) - set(numbers)
    assert not dups, f"{len(dups)} numbers committed more than once, e.g. {sorted(dups.items())[:10]}"
    assert not missing, f"{len(missing)} numbers never committed, e.g. {sorted(missing)[:10]}"
    assert len(rows) == n
    want = Counter(x % keys for x in range(n))
    by_key = {}
    for x, key, count in rows:
        assert key == x % keys, (x, key)
        by_key.setdefault(key, []).append(count)
    for key, counts in by_key.items():
        # each key's running count went 1, 2, ... exactly once: no update lost or applied twice
        assert sorted(counts) == list(range(1, want[key] + 1)), \
            f"key {key}: counts {Counter(counts).most_common(3)}..., want 1..{want[key]} once each"
    assert {k: max(c) for k, c in by_key.items()} == dict(want)
