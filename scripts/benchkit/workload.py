"""The standard word-count workload: its sentences and the exact expected counts."""
from __future__ import annotations

import ast
import importlib.util
import os
from collections import Counter


from .common import TOPOLOGY


# ---------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------

def topology_sentences():
    """SENTENCES of the bench topology, read without importing it."""
    with open(TOPOLOGY) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SENTENCES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{TOPOLOGY} defines no SENTENCES")


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


