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


def test_bench_quick_windowed_rows(home, tmp_path):
    """The windowed rows, tiny: win-111 (exact per-(window, word) counts, window latency
    from its latency run) and the many-keys pair (tumbling and sliding, checked by digest,
    with the window bolt's peak RSS and open windows)."""
    out = tmp_path / "bench.jsonl"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench.py"), "--quick",
                        "--only", "win-111,win-slide-100k", "--home", home, "--out", str(out)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    why = f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == 0, f"bench.py exited {r.returncode}\n{why}"
    table = {}  # the first table's rows (row, ok, ...)
    for ln in r.stdout.splitlines():
        if ln.startswith(("win-111 ", "win-tumble-100k ", "win-slide-100k ")):
            table.setdefault(ln.split()[0], ln.split())
    assert table["win-111"][1] == "2/2", why  # its throughput and latency runs, both exact
    assert table["win-tumble-100k"][1] == "1/1" and table["win-slide-100k"][1] == "1/1", why
    assert "windowed rows" in r.stdout and "window bolt peak RSS, sliding / tumbling" in r.stdout, why
    recs = {(rec["row"], rec["kind"]): rec for rec in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {("win-111", "throughput"), ("win-111", "latency"), ("win-tumble-100k", "throughput"),
                         ("win-slide-100k", "throughput")}, sorted(recs)
    for rec in recs.values():
        assert rec["ok"] and not rec["problems"], rec
        assert rec["words_per_s"] > 0 and rec["win_bolt_rss_mb"] > 0 and rec["open_windows_peak"] > 0, rec
    th = recs[("win-111", "throughput")]
    # 20,000 sentences: 2 event seconds (+ the first sentences 0.25 s early): 3 tumbling windows
    assert th["sentences"] == 20000 and th["words"] == 148000 and th["windows_fired"] > 0, th
    lat = recs[("win-111", "latency")]
    assert lat["lat_samples"] >= 1 and 0 < lat["p50_ms"] <= lat["p99_ms"], lat
    assert lat["wm_p99_ms"] is not None, lat
    tumble, slide = recs[("win-tumble-100k", "throughput")], recs[("win-slide-100k", "throughput")]
    assert tumble["keys"] == slide["keys"] == 2000 and tumble["tuples"] == slide["tuples"] == 20000
    # every tuple is in one tumbling window and in ten sliding ones (results checked by digest)
    assert tumble["count_sum"] == 20000 and slide["count_sum"] == 200000, (tumble, slide)
    assert slide["open_windows_peak"] > tumble["open_windows_peak"], (tumble, slide)
