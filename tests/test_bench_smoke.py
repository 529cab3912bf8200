"""scripts/bench.py runs: its quick smoke test of one row gives ok results and leaves nothing behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def test_bench_quick_amo_111(home, tmp_path):
    out = tmp_path / "bench.jsonl"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench.py"), "--quick", "--only", "amo-111",
                        "--home", home, "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, f"bench.py exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("amo-111 ")]
    assert rows, f"no amo-111 row\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    # the throughput run and the latency run, both ok
    assert rows[0][1] == "2/2", f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert {rec["kind"] for rec in recs} == {"throughput", "latency"}
    for rec in recs:
        assert rec["ok"] and rec["row"] == "amo-111", rec  # ok: the counts are exactly the expected ones
        assert rec["words"] > 0 and not rec["problems"], rec
    th = next(rec for rec in recs if rec["kind"] == "throughput")
    assert th["sentences"] == 20000 and th["words_per_s"] > 0 and th["peak_rss_mb"] > 0
    assert 0 < th["startup_s"] < 60
    lat = next(rec for rec in recs if rec["kind"] == "latency")
    assert lat["p50_ms"] is not None and lat["p99_ms"] >= lat["p50_ms"]
