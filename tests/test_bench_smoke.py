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


def test_bench_quick_exactly_once_output_and_checkpoint_rows(home, tmp_path):
    """eo-111 writes through a transactional FileSink and its committed output is checked
    exact; the ckpt-1m rows (100,000 keys with --quick) give the checkpoint figures and
    the issue's targets, in the same run."""
    out = tmp_path / "bench.jsonl"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench.py"), "--quick",
                        "--only", "eo-111,ckpt-1m", "--home", home, "--out", str(out)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    why = f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == 0, f"bench.py exited {r.returncode}\n{why}"
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("eo-111 ")]
    assert rows[0][1] == "2/2" and rows[1][1] == "2/2", why  # the first table's, the exactly-once output's
    assert "exactly-once output" in r.stdout and "checkpoint cost, 100,000 keys" in r.stdout, why
    for target in ("ckpt-1m, 1% changed: largest checkpoint / full snapshot (bytes)",
                   "ckpt-1m, 1% changed: longest loop pause at a checkpoint (ms)"):
        assert target in r.stdout, why
    recs = {(rec["row"], rec["kind"]): rec for rec in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {("eo-111", "throughput"), ("eo-111", "latency"), ("ckpt-1m", "ckpt")}, sorted(recs)
    for kind in ("throughput", "latency"):
        eo = recs[("eo-111", kind)]
        assert eo["ok"] and eo["sink_exact"] and not eo["problems"], eo
        # every word's final count committed (~130 distinct words), at least the end's checkpoint
        assert eo["sink_files"] >= 1 and eo["sink_checkpoints"] >= 1 and eo["sink_rows"] >= 100, eo
        assert eo["sink_rows_received"] == eo["sink_rows"], eo  # no failure: nothing replayed
    th = recs[("eo-111", "throughput")]
    assert th["sentences"] == 20000 and th["words"] == 148000 and th["words_per_s"] > 0, th
    ck = recs[("ckpt-1m", "ckpt")]
    assert ck["ok"] and ck["restored_exact"] and ck["keys"] == 100000 and ck["rounds"] == 2, ck
    assert [f["keys_changed"] for f in ck["fractions"]] == [100, 1000, 10000], ck["fractions"]
    assert all(len(f["delta_bytes"]) == len(f["pause_ms"]) == 2 for f in ck["fractions"])
    deltas = [f["delta_bytes_med"] for f in ck["fractions"]]
    assert 0 < deltas[0] < deltas[1] < deltas[2] < ck["full_bytes"], (deltas, ck["full_bytes"])
    assert len(ck["compactions"]) == 3 and all(c["base_bytes"] > 0 for c in ck["compactions"]), ck
    assert not os.listdir(os.path.join(home, "ckpt-measure")), "the checkpoint files were not removed"
    assert not os.listdir(os.path.join(home, "sink")), "the sink's output of an ok run was not removed"


def test_the_committed_output_check_finds_what_is_not_exact(tmp_path, monkeypatch):
    """scripts/benchkit/runner.py check_committed, on sink directories written by hand: exact
    output passes; a wrong final count, a count committed twice and an uncommitted leftover
    each fail, naming what is wrong."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "scripts"))
    from benchkit.runner import check_committed

    def sink(name, files):
        d = tmp_path / name
        d.mkdir()
        for fname, rows in files.items():
            (d / fname).write_text("".join(json.dumps(row) + "\n" for row in rows))
        return str(d)

    want = {"a": 3, "b": 1}
    good = {"counts-1-1.jsonl": [["a", 2], ["b", 1]], "counts-2-1.jsonl": [["a", 3]]}
    rec = {}
    assert check_committed(rec, sink("good", good), want) == []
    assert rec == {"sink_files": 2, "sink_rows": 3, "sink_checkpoints": 2, "sink_exact": True}
    short = check_committed({}, sink("short", {"counts-1-1.jsonl": [["a", 2], ["b", 1]]}), want)
    assert len(short) == 1 and "not exact: 1 of 2 words" in short[0] and "'a' 2 (want 3)" in short[0], short
    twice = check_committed({}, sink("twice", dict(good, **{"counts-3-1.jsonl": [["a", 3]]})), want)
    assert len(twice) == 1 and "'a' do not increase once per checkpoint" in twice[0], twice
    left = check_committed({}, sink("left", dict(good, **{".pending-counts-3-1": [["a", 4]]})), want)
    assert len(left) == 1 and "left uncommitted" in left[0], left
    assert check_committed({}, str(tmp_path / "none"), want) == [f"the sink wrote nothing: no directory "
                                                                  f"{tmp_path / 'none'}"]


def test_bench_quick_disk_backend_rows(home, tmp_path):
    """The disk keyed-state backend's rows, small: disk-wc (the exactly-once word count
    with keyed get + put per word, memory and disk backends in the same run, output
    checked exact; their ratio and the count instance's RSS) and disk-10m (200,000
    distinct keys with --quick: every key counted once, the count instance's RSS)."""
    out = tmp_path / "bench.jsonl"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench.py"), "--quick", "--only", "disk",
                        "--home", home, "--out", str(out)],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    why = f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == 0, f"bench.py exited {r.returncode}\n{why}"
    recs = {(rec["row"], rec["kind"]): rec for rec in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {("disk-wc-memory", "throughput"), ("disk-wc-disk", "throughput"),
                         ("disk-10m", "disk")}, sorted(recs)
    for backend in ("memory", "disk"):
        wc = recs[(f"disk-wc-{backend}", "throughput")]
        assert wc["ok"] and wc["sink_exact"] and not wc["problems"] and wc["backend"] == backend, wc
        assert wc["sentences"] == 20000 and wc["words"] == 148000 and wc["words_per_s"] > 0, wc
        assert wc["count_rss_mb"] > 0, wc
    dk = recs[("disk-10m", "disk")]
    assert dk["ok"] and not dk["problems"] and dk["backend"] == "disk", dk
    assert dk["keys"] == dk["emitted"] == dk["tuples"] == dk["inserted"] == 200000, dk
    assert dk["sample_checked"] == 1000 and dk["sample_bad"] == 0, dk
    assert dk["keys_per_s"] > 0 and dk["count_rss_mb"] > 0 and dk["count_rss_series"], dk
    assert dk["count_rss_mb"] == max(mb for _, mb in dk["count_rss_series"]), dk
    for text in ("disk / memory words/s, per run: ", "disk keyed state with 200,000 distinct keys",
                 "disk-wc: disk / memory backend words/s (EO 1-1-1, get + put per word)",
                 "disk-10m: count instance peak RSS, 200,000 keys on disk (MB)"):
        assert text in r.stdout, why
    ratio = r.stdout.split("disk / memory words/s, per run: ")[1].split()[0]
    assert float(ratio) > 0, why
    # the checkpoint files, the state database and the sink's output are removed
    assert not os.listdir(os.path.join(home, "checkpoints")), os.listdir(os.path.join(home, "checkpoints"))
    assert not os.listdir(os.path.join(home, "sink")) and not os.listdir(os.path.join(home, "run")), why


def test_bench_keyed_direct_switch_needs_exactly_once_throughput():
    """BENCH_KEYED_DIRECT=1 without BENCH_STATEFUL=1 is refused in one line naming both."""
    env = dict(os.environ, BENCH_KEYED_DIRECT="1", BENCH_STATEFUL="0", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1])",
                        os.path.join(ROOT, "scripts", "bench_topologies", "word_count.py")],
                       capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("ValueError: BENCH_KEYED_DIRECT=1 needs BENCH_STATEFUL=1 and BENCH_MODE=throughput, not "
                    "BENCH_STATEFUL='0' and BENCH_MODE='throughput'"), r.stderr
