"""complete_topology and a real-process run give the same output for the same input,
and the bittern_run fixture fails a test that leaves a process behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from bittern.testing import complete_topology
from bittern.testing.pytest_plugin import BitternRunner, bittern_run  # noqa: F401  (the fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORD_COUNT = os.path.join(ROOT, "topologies", "word_count.py")
sys.path.insert(0, os.path.dirname(WORD_COUNT))
from word_count import SENTENCES  # noqa: E402


def counts_by_task(directory):
    return {f: json.load(open(os.path.join(directory, f))) for f in sorted(os.listdir(directory))}


def test_complete_topology_matches_a_real_run_task_by_task(bittern_run, tmp_path):  # noqa: F811
    n = 300
    real, local = tmp_path / "real", tmp_path / "local"
    r = bittern_run.run(WORD_COUNT, duration=5, timeout=120,
                        config={"wordcount.sentences": n, "wordcount.output.dir": str(real)})
    assert r.components["sentence"]["emitted"] == n
    res = complete_topology(WORD_COUNT, sources={"sentence": [[SENTENCES[i % 20]] for i in range(n)]},
                            config={"wordcount.output.dir": str(local)})
    # the same tasks got the same words: the fields grouping routed alike in both
    assert counts_by_task(str(local)) == counts_by_task(str(real))
    assert len(counts_by_task(str(real))) == 2
    assert r.components["split"]["emitted"] == len(res.tuples("split"))


def test_the_fixture_fails_a_test_that_leaves_a_process_behind(tmp_path):
    runner = BitternRunner(tmp_path / "home")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", runner.home])
    try:
        assert [x.pid for x in runner.processes()] == [p.pid]
        leaked = runner.kill_leftovers(grace=0.2)
        assert len(leaked) == 1 and str(p.pid) in leaked[0]
        assert p.wait(timeout=10) != 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert runner.processes() == []


def test_plugin_loads_with_dash_p(tmp_path):
    test = tmp_path / "test_x.py"
    test.write_text("def test_fixture(bittern_run):\n    assert bittern_run.home.endswith('bittern-home')\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                        "bittern.testing.pytest_plugin", str(test)], capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout + r.stderr
