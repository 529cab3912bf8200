"""The standard word-count workload: its sentences and the exact expected counts."""
from __future__ import annotations

import ast
import importlib.util
import math
import os
from collections import Counter


from .common import TOPOLOGY, WIN_TOPOLOGY


# ---------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------

def topology_constant(name, path=TOPOLOGY):
    """A literal constant of a bench topology, read without importing it."""
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{path} defines no {name}")


def topology_sentences(path=TOPOLOGY):
    """SENTENCES of a bench topology, read without importing it."""
    return topology_constant("SENTENCES", path)


# The windowed workload's event times (wc_common.event_time; the copy of the windowed
# topology, used when ../shared/bench is not there).
EVENTS_PER_SEC = topology_constant("EVENTS_PER_SEC", WIN_TOPOLOGY)
EPOCH = topology_constant("EPOCH", WIN_TOPOLOGY)


def _event_time(i):
    t = EPOCH + i / EVENTS_PER_SEC
    return t - 0.25 if i % 7 == 3 else t


def weight(kidx, start):
    """The key mode's checksum weight (windowed_word_count.weight)."""
    return ((kidx * 2654435761) ^ (int(start) * 40503)) % 1000003 + 1


class Workload:
    """Expected results; from ../shared/bench/wc_common.py when it is there (and then the
    topology's sentences must be identical to it)."""

    def __init__(self, peers_dir):
        self.sentences = topology_sentences()
        self.source = TOPOLOGY
        self.wc = None
        path = os.path.join(peers_dir, "wc_common.py") if peers_dir else None
        if path and os.path.exists(path):
            spec = importlib.util.spec_from_file_location("bench_wc_common", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            if list(mod.SENTENCES) != list(self.sentences):
                raise SystemExit(f"error: the SENTENCES of {TOPOLOGY} differ from {path}: "
                                 "the benchmark would not run the standard workload")
            self.wc = mod
            self.source = path
        # (the windowed topology imports its SENTENCES from TOPOLOGY: one list)
        self._digests = {}

    def expected_counts(self, n):
        if self.wc is not None:  # (its Counter keeps words of unseen sentences at 0)
            return {w: c for w, c in self.wc.expected_counts(n).items() if c}
        c = Counter()
        full, rem = divmod(n, len(self.sentences))
        for j, s in enumerate(self.sentences):
            for w in s.split():
                c[w] += full + (1 if j < rem else 0)
        return {w: k for w, k in c.items() if k}

    def expected_words(self, n):
        return sum(self.expected_counts(n).values())



    # -- the windowed workload ------------------------------------------------------------
    def event_time(self, i):
        return self.wc.event_time(i) if self.wc is not None and hasattr(self.wc, "event_time") else _event_time(i)

    def expected_window_counts(self, n):
        """{(window start, word): count}, tumbling 1 s windows (wc_common's when it has them)."""
        if self.wc is not None and hasattr(self.wc, "expected_window_counts"):
            return self.wc.expected_window_counts(n)
        c = {}
        for i in range(n):
            start = math.floor(_event_time(i))
            for w in self.sentences[i % len(self.sentences)].split():
                c[(start, w)] = c.get((start, w), 0) + 1
        return c

    def key_digest(self, n, keys, window):
        """The key mode's expected ``(fires, words, checksum)``: tuple i is key ``k<i % keys>``
        at ``event_time(i)``, in every window (tumbling 1 s, or sliding 10 s every 1 s) that
        holds it; ``fires`` = distinct (key, window) pairs, ``words`` = sum of the counts,
        ``checksum`` = sum of count x weight(key, start). Computed per key (small sets)."""
        memo = (n, keys, window)
        if memo in self._digests:
            return self._digests[memo]
        size, slide = (10.0, 1.0) if window == "sliding" else (1.0, 1.0)
        et = self.event_time
        fires = words = checksum = 0
        for kidx in range(min(keys, n)):
            starts = set()
            for i in range(kidx, n, keys):
                ts = et(i)
                k = math.floor(ts / slide)
                while True:
                    start = k * slide
                    if start + size <= ts:
                        break
                    starts.add(start)
                    checksum += weight(kidx, start)
                    words += 1
                    k -= 1
            fires += len(starts)
        self._digests[memo] = (fires, words, checksum)
        return self._digests[memo]
