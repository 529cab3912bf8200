"""The example topologies run and produce exactly what they should."""
from __future__ import annotations

import json
import os

from conftest import EXAMPLES


def run_json(bittern, name, *config, duration=2):
    args = ["run", os.path.join(EXAMPLES, name), "--duration", duration, "--json"]
    for kv in config:
        args += ["--config", kv]
    r = bittern(*args, check=True)
    lines = r.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    printed = [json.loads(ln[ln.index("{"):]) for ln in lines[:-1] if "{" in ln]
    return {c["component"]: c for c in summary["components"]}, printed


def test_multi_stream(bittern):
    comps, printed = run_json(bittern, "multi_stream.py", "multi.numbers=1000")
    assert comps["numbers"]["emitted"] == 1000
    assert comps["router"]["emitted"] == 1000 + 100  # even/odd + multiples of 10 on "pick"
    assert comps["audit"]["executed"] == 2 * 500  # all grouping: both tasks see every odd
    assert comps["stats"]["executed"] == 500
    assert comps["checker"]["executed"] == 100
    by_task = {(p["component"], p["task"]): p["seen"] for p in printed}
    assert [s for (c, _), s in sorted(by_task.items()) if c == "audit"] == [{"odd": 500}, {"odd": 500}]
    stats = [s for (c, _), s in sorted(by_task.items()) if c == "stats"]
    assert stats == [{"even": 500}, {}]  # global grouping: the lowest task id only
    checkers = [s for (c, _), s in sorted(by_task.items()) if c == "checker"]
    assert [s["pick"] for s in checkers] == [34, 33, 33] and all(s["misrouted"] == 0 for s in checkers)


def test_exclamation(bittern):
    comps, _ = run_json(bittern, "exclamation.py", "exclamation.words=3000")
    assert comps["word"]["emitted"] == 2 * 3000  # two spout tasks
    assert comps["exclaim1"]["executed"] == 6000
    assert comps["exclaim2"]["executed"] == 6000


def test_pickle_serializer_carries_python_values(bittern):
    comps, printed = run_json(bittern, "word_count.py", "wordcount.sentences=2000",
                              "topology.serializer=pickle")
    assert comps["count"]["executed"] == comps["split"]["emitted"] > 0


def _check_example(name, out, *args):
    import subprocess
    import sys
    from conftest import ROOT
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), out, *args], capture_output=True, text=True,
                       cwd=os.path.join(ROOT, "topologies"))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_windowed_word_count_counts_every_word_in_its_window_or_as_too_late(bittern, tmp_path):
    """Event-time tumbling windows over out-of-order and late sentences: the example's own
    check says every word was counted once, in the last result of its window or on the
    late stream; its generator makes both late kinds, so both must have happened."""
    out = str(tmp_path / "out")
    r = bittern("run", os.path.join(EXAMPLES, "windowed_word_count.py"), "--until-done", "--duration", "90",
                "--json", "--config", f"wordcount.output.dir={out}", "--config", "wordcount.sentences=2000",
                timeout=150, check=True)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    comps = {c["component"]: c for c in summary["components"]}
    assert comps["sentences"]["acked"] == 2000 and comps["sentences"]["failed"] == 0
    report = _check_example("windowed_word_count.py", out, "2000")
    assert "exact" in report
    late = json.load(open(os.path.join(out, "late.json")))
    assert late and all("later than the allowed lateness" in reason for _, reason in late)


def test_sessions_example_finds_the_sessions_computed_directly(bittern, tmp_path):
    out = str(tmp_path / "out")
    bittern("run", os.path.join(EXAMPLES, "sessions.py"), "--until-done", "--duration", "90",
            "--config", f"sessions.output.dir={out}", timeout=150, check=True)
    assert "exact" in _check_example("sessions.py", out)
