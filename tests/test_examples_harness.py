"""The example topologies tested with bittern.testing, as a user would test theirs:
whole topologies in one process (complete_topology, spouts replaced by given tuples),
one bolt at a time (BoltHarness), and in real processes (the bittern_run fixture)."""
from __future__ import annotations

import math
import os
import sys
from collections import Counter

from bittern.testing import BoltHarness, complete_topology
from bittern.testing.pytest_plugin import bittern_run  # noqa: F401  (the fixture)

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "topologies")
sys.path.insert(0, EXAMPLES)

import exactly_once_word_count as eowc  # noqa: E402
import sessions  # noqa: E402
import windowed_word_count as wwc  # noqa: E402
from word_count import SENTENCES, CountBolt  # noqa: E402


def example(name):
    return os.path.join(EXAMPLES, name)


def test_word_count_counts_every_word(tmp_path):
    sentences = [[SENTENCES[i % 20]] for i in range(200)]
    r = complete_topology(example("word_count.py"), sources={"sentence": sentences},
                          config={"wordcount.output.dir": str(tmp_path)})
    want = Counter(w for (s,) in sentences for w in s.split())
    assert Counter(w for (w,) in r.tuples("split")) == want
    import json
    got = Counter()
    for f in os.listdir(tmp_path):
        got.update(json.load(open(tmp_path / f)))
    assert got == want  # the count tasks' files, written in close()


def test_word_count_bolt_alone():
    with BoltHarness(CountBolt, inputs={"split": ["word"]}) as h:
        h.process_many([["a"], ["b"], ["a"]])
        assert h.obj.counts == {"a": 2, "b": 1} and len(h.acked) == 3


def test_exclamation_adds_six_marks_through_two_bolts():
    words = [["w%d" % i] for i in range(30)]
    r = complete_topology(example("exclamation.py"), sources={"word": words},
                          config={"topology.reliability.mode": "ATLEAST_ONCE"})
    assert sorted(r.tuples("exclaim2")) == sorted([[w + "!!!!!!"] for (w,) in words])
    assert sorted(r.acked["word"]) == list(range(30))


def test_multi_stream_named_all_global_and_direct():
    r = complete_topology(example("multi_stream.py"), sources={"numbers": [[n] for n in range(100)]})
    assert sorted(r.tuples("router", "even")) == [[n] for n in range(0, 100, 2)]
    assert sorted(r.tuples("router", "pick")) == [[n] for n in range(0, 100, 10)]
    assert r.counters["audit"]["__execute-count"] == 2 * 50  # all grouping: both tasks
    assert r.counters["stats"]["__execute-count"] == 50
    checkers = r.tasks["checker"]
    picks = [e for e in r.emitted if e.stream == "pick"]
    assert all(e.direct_task == checkers[e.values[0] // 10 % 3] for e in picks)


def test_multi_stream_router_alone_in_its_topology():
    h = BoltHarness.of(example("multi_stream.py"), "router")
    try:
        h.process([20])
        h.process([7])
        assert [(e.stream, e.values) for e in h.emitted] == [("even", [20]), ("pick", [20]), ("odd", [7])]
    finally:
        h.close()


def test_windowed_word_count_counts_every_word_in_its_window_or_as_too_late():
    n = 600
    r = complete_topology(example("windowed_word_count.py"), config={"wordcount.sentences": n,
                                                                     "wordcount.rate": 0})
    assert sorted(r.acked["sentences"]) == list(range(n)) and r.failed["sentences"] == []
    got = {}
    for word, start, _end, count in r.tuples("count"):
        got[(start, word)] = count  # the last result of a window replaces the earlier
    got = Counter(got)
    late = r.tuples("count", "late")
    for (ts, word), _ts, _reason in late:
        got[(float(math.floor(ts)), word)] += 1
    # (which sentences come too late depends on when watermarks are sent: in one process
    # the input all arrives before the virtual clock moves, so the account is what is checked)
    assert got == wwc.expected(n)


def test_windowed_count_fires_on_the_watermark_and_again_when_late():
    from bittern import Grouping
    with BoltHarness(wwc.Count, inputs={"split": (["ts", "word"], Grouping.fields("word"))}) as h:
        h.process_many([[100.1, "fox"], [100.7, "fox"], [101.2, "dog"]])
        h.watermark(101.0)
        assert h.tuples() == [["fox", 100.0, 101.0, 2]] and h.pending == 1
        h.process([100.9, "fox"])  # late, within the allowed 2 s: the window fires again
        assert h.tuples()[-1] == ["fox", 100.0, 101.0, 3]
        h.watermark(104.0)
        h.process([100.5, "fox"])  # too late: the late stream
        assert h.tuples("late")[0][0] == [100.5, "fox"]


def test_sessions_are_the_sessions_computed_directly():
    r = complete_topology(example("sessions.py"))
    assert sorted([u, s, e, n] for u, s, e, n, _ in r.tuples("sessions")) == sessions.expected()


def test_spark_word_count_with_its_spark_source_replaced():
    lines = [[SENTENCES[i % 20]] for i in range(100)]
    r = complete_topology(example("spark_word_count.py"), sources={"lines": lines})
    assert Counter(w for (w,) in r.tuples("split")) == Counter(w for (s,) in lines for w in s.split())
    assert sorted(r.acked["lines"]) == list(range(100))


def test_exactly_once_count_emits_running_totals_at_each_checkpoint():
    from bittern import Grouping
    with BoltHarness(eowc.Count, inputs={"split": (["word"], Grouping.fields("word"))},
                     config={"topology.reliability.mode": "EFFECTIVELY_ONCE"}) as h:
        h.process_many([["a"], ["b"], ["a"]])
        h.checkpoint(1)
        assert sorted(h.tuples()) == [["a", 2], ["b", 1]]
        h.process(["b"])
        h.checkpoint(2)
        assert h.tuples()[2:] == [["b", 2]] and h.keyed_state == {"a": 2, "b": 2}


def test_exactly_once_word_count_in_real_processes(bittern_run, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    r = bittern_run.run(example("exactly_once_word_count.py"), until_done=True, duration=120, timeout=180,
                        config={"wordcount.lines": 500, "wordcount.input.dir": str(tmp_path / "in"),
                                "wordcount.output.dir": str(out)})
    assert r.returncode == 0
    assert eowc.committed_counts(str(out)) == eowc.expected_counts(500)
