"""Bounded exactly-once runs commit their end (``bittern run --until-done`` under
EFFECTIVELY_ONCE): a spout's done() counts only once the first checkpoint it took after
its last emit is committed at every sink, with default settings, also when that
checkpoint is abandoned once or a sink's commit fails before it works; when the end
cannot be committed, the run says which checkpoint and which component held it up and
exits non-zero."""
from __future__ import annotations

import os
import sys

from conftest import TOPOLOGIES
from eokit import check_exactly_once, committed_rows

BOUNDED = os.path.join(TOPOLOGIES, "bounded_eo.py")
N, K = 3000, 7


def run(bittern, out, *config, duration=90):
    args = ["run", BOUNDED, "--until-done", "--duration", str(duration), "--config", f"test.out={out}",
            "--config", f"test.count={N}", "--config", f"test.keys={K}"]
    for kv in config:
        args += ["--config", kv]
    return bittern(*args, timeout=duration + 60)


def test_a_user_spout_that_calls_done_commits_every_row_with_default_settings(bittern, tmp_path):
    out = str(tmp_path / "out")
    r = run(bittern, out)
    assert r.returncode == 0, r.stderr
    check_exactly_once(committed_rows(out), N, K)


def test_the_end_is_committed_when_the_checkpoint_after_the_last_emit_is_abandoned_once(bittern, tmp_path):
    out = str(tmp_path / "out")
    r = run(bittern, out, "test.fail.save.after.end=1", "topology.stateful.checkpoint.timeout.secs=2")
    assert r.returncode == 0, r.stderr
    assert [f for f in os.listdir(out) if f.startswith("failed-save-")], "no save failed: nothing was injected"
    check_exactly_once(committed_rows(out), N, K)


def test_a_sink_whose_commit_fails_twice_commits_everything_in_the_end(bittern, tmp_path):
    out = str(tmp_path / "out")
    r = run(bittern, out, "test.fail.commits=2")
    assert r.returncode == 0, r.stderr
    tries = [int(open(os.path.join(out, f)).read()) for f in os.listdir(out) if f.startswith("commit-tries-")]
    assert tries and all(t == 2 for t in tries), tries  # each sink task failed twice, then committed
    check_exactly_once(committed_rows(out), N, K)
    assert "errors" in r.stdout  # (the summary counts the failed commits)
    summary = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.strip()}
    assert int(summary["sink"][-1]) >= 4


def test_an_end_that_cannot_be_committed_fails_the_run_naming_the_checkpoint_and_the_sink(bittern, tmp_path):
    out = str(tmp_path / "out")
    r = run(bittern, out, "test.fail.commits=-1", "topology.stateful.checkpoint.timeout.secs=1")
    assert r.returncode == 1, (r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert "not committed" in errors[0] and "checkpoint" in errors[0] and "component 'sink'" in errors[0], errors
    assert committed_rows(out) == []  # nothing became visible, nothing half-committed


def test_the_example_commits_its_end_without_the_deprecated_key(bittern, tmp_path):
    """topologies/exactly_once_word_count.py over 200 lines, default settings (the case the
    issue found committing nothing)."""
    from conftest import EXAMPLES, ROOT
    out = str(tmp_path / "counts")
    r = bittern("run", os.path.join(EXAMPLES, "exactly_once_word_count.py"), "--until-done", "--duration", "90",
                "--config", "wordcount.lines=200", "--config", f"wordcount.output.dir={out}",
                "--config", f"wordcount.input.dir={tmp_path / 'in'}", timeout=150)
    assert r.returncode == 0, r.stderr
    import subprocess
    check = subprocess.run([sys.executable, os.path.join(EXAMPLES, "exactly_once_word_count.py"), out, "200"],
                           capture_output=True, text=True, cwd=ROOT)
    assert check.returncode == 0 and '"exact": true' in check.stdout, check.stdout + check.stderr
