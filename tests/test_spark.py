"""SparkSpout with real pyspark and a local JVM per spout task: a Parquet dataset
counted exactly once, the RSS of each spout process bounded, replays under at least
once, exact committed results under exactly once after a kill -9 of a spout task,
and bad sources refused at submit time before anything starts."""
from __future__ import annotations

import json
import os
import shutil
import time

import psutil

from conftest import TOPOLOGIES, processes_of

import pyarrow as pa  # noqa: E402  (bittern[spark], installed by scripts/setup.sh: never skipped)
import pyarrow.parquet as pq  # noqa: E402
import pyspark  # noqa: E402,F401

COUNT = os.path.join(TOPOLOGIES, "spark_count.py")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]
# Python (pyspark imported) + its JVM (-Xmx512m, serial GC): measured ~120 + ~470 MB here
RSS_BOUND_MB = 1000


def make_dataset(directory, rows, files):
    """``files`` Parquet files of rows (id, word), ids 0..rows-1; returns the directory."""
    os.makedirs(directory, exist_ok=True)
    per = -(-rows // files)
    for k in range(files):
        ids = range(k * per, min(rows, (k + 1) * per))
        table = pa.table({"id": pa.array(ids, pa.int64()), "word": [WORDS[i % 5] for i in ids]})
        pq.write_table(table, os.path.join(directory, f"part-{k:03d}.parquet"), row_group_size=50000)
    return directory


def counts(out):
    total = None
    for f in sorted(os.listdir(out)):
        if f.startswith("counts-"):
            data = open(os.path.join(out, f), "rb").read()
            total = list(data) if total is None else [a + b for a, b in zip(total, data)]
    return total


def alive(pids, grace=10.0):
    """Those of ``pids`` still running after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        left = [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def run_count(bittern, data, out, rows, par, *confs, duration=240):
    """``bittern run spark_count.py --until-done``; returns (summary, {pid: max RSS MB of
    the spout process + its JVM}), having checked that every JVM seen is gone."""
    bittern.env["SPARK_COUNT_PAR"] = str(par)
    p = bittern.popen("run", COUNT, "--until-done", "--duration", duration, "--json",
                      "--config", f"spout.spark.path={data}", "--config", f"test.out={out}",
                      "--config", f"test.rows={rows}", *sum((["--config", c] for c in confs), []))
    peak, java = {}, set()
    while p.poll() is None:
        for proc in processes_of(bittern.home):
            try:
                kids = [k for k in proc.children() if k.name() == "java"]
                java.update(k.pid for k in kids)
                if kids:
                    rss = proc.memory_info().rss + sum(k.memory_info().rss for k in kids)
                    peak[proc.pid] = max(peak.get(proc.pid, 0), rss >> 20)
            except psutil.Error:
                pass
        time.sleep(0.5)
    stdout, stderr = p.communicate()
    assert p.returncode == 0, f"bittern run exited {p.returncode}\n{stdout[-2000:]}\n{stderr[-3000:]}"
    assert java, "no spout started a JVM"
    assert not alive(java), "a spout's JVM outlived its topology"
    return json.loads(stdout.strip().splitlines()[-1]), peak


def test_million_rows_in_eight_files_counted_exactly_once_in_bounded_memory(bittern, tmp_path):
    rows = 1_000_000
    data = make_dataset(str(tmp_path / "data"), rows, 8)
    out = str(tmp_path / "out")
    t0 = time.monotonic()
    summary, peak = run_count(bittern, data, out, rows, 3)
    elapsed = time.monotonic() - t0
    spout = next(c for c in summary["components"] if c["component"] == "spout")
    assert spout["emitted"] == rows, summary
    got = counts(out)
    assert len(got) == rows
    missing = [i for i, c in enumerate(got) if c == 0]
    dups = [i for i, c in enumerate(got) if c > 1]
    assert not missing and not dups, f"{len(missing)} rows missing (e.g. {missing[:5]}), {len(dups)} twice"
    assert len(peak) == 3, f"expected 3 spout processes with a JVM each, saw {peak}"
    assert max(peak.values()) < RSS_BOUND_MB, peak
    print(f"1M rows in {elapsed:.1f}s; peak RSS per spout process (python + JVM), MB: {sorted(peak.values())}")


def test_failing_bolt_still_gets_every_row_at_least_once(bittern, tmp_path):
    rows = 60_000
    data = make_dataset(str(tmp_path / "data"), rows, 4)
    out = str(tmp_path / "out")
    summary, _ = run_count(bittern, data, out, rows, 2, "topology.reliability.mode=ATLEAST_ONCE",
                           "test.fail.pct=10")
    spout = next(c for c in summary["components"] if c["component"] == "spout")
    assert spout["failed"] >= rows // 10, summary
    assert spout["acked"] == rows, summary
    got = counts(out)
    missing = [i for i, c in enumerate(got) if c == 0]
    assert not missing, f"{len(missing)} rows never counted, e.g. {missing[:5]}"


def _submit_fails(bittern, *confs, env=None):
    t0 = time.monotonic()
    if env:
        bittern.env.update(env)
    r = bittern("submit", COUNT, "--name", "bad", *sum((["--config", c] for c in confs), []), timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0, r.stdout
    assert bittern.state("topologies", "bad") is None
    assert not processes_of(bittern.home), "a refused submit left processes behind"
    assert elapsed < 20, f"refused only after {elapsed:.1f}s: was a JVM started?"
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


def test_bad_sources_are_refused_at_submit_before_anything_starts(bittern, tmp_path):
    data = make_dataset(str(tmp_path / "data"), 1000, 2)
    base = ("test.out=" + str(tmp_path / "out"), "test.rows=1000")
    err = _submit_fails(bittern, f"spout.spark.path={tmp_path / 'nope'}", *base)
    assert "does not exist" in err and "nope" in err, err
    text = tmp_path / "text"
    text.mkdir()
    (text / "a.parquet").write_text("id,word\n1,x\n")
    err = _submit_fails(bittern, f"spout.spark.path={text}", *base)
    assert "cannot be read as parquet" in err, err
    err = _submit_fails(bittern, f"spout.spark.path={data}", "spout.spark.format=xls", *base)
    assert "unknown format 'xls'" in err, err
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"]}), str(other / "x.parquet"))
    err = _submit_fails(bittern, f"spout.spark.path={other}", *base)
    assert "field 'word' is not a column" in err, err
    nojava = tmp_path / "bin"
    nojava.mkdir()
    env = {"PATH": str(nojava)}
    bittern.env.pop("JAVA_HOME", None)
    err = _submit_fails(bittern, f"spout.spark.path={data}", *base, env=env)
    assert "needs Java 17+" in err, err
    assert shutil.which("java"), "the other tests need java on PATH"


def test_the_spark_word_count_example(bittern, tmp_path):
    """``bittern run topologies/spark_word_count.py --until-done`` over a Parquet dataset
    the test generates counts every word exactly."""
    import sys
    from conftest import EXAMPLES
    sys.path.insert(0, EXAMPLES)
    try:
        import spark_word_count as wc
    finally:
        sys.path.remove(EXAMPLES)
    lines = 5000
    data = wc.generate(str(tmp_path / "lines"), lines, 3)
    out = str(tmp_path / "out")
    r = bittern("run", os.path.join(EXAMPLES, "spark_word_count.py"), "--until-done", "--duration", "150",
                "--json", "--config", f"spout.spark.path={data}", "--config", f"wordcount.output.dir={out}",
                timeout=200, check=True)
    got = {}
    for f in os.listdir(out):
        for word, n in json.load(open(os.path.join(out, f))).items():
            got[word] = got.get(word, 0) + n
    assert got == wc.expected_counts(lines), r.stderr[-2000:]


def committed_buckets(out):
    """{bucket: final count} from the committed sink files (the largest count wins)."""
    got = {}
    for f in os.listdir(out):
        if f.startswith("counts-") and f.endswith(".jsonl"):
            for line in open(os.path.join(out, f)):
                if line.strip():
                    b, n = json.loads(line)
                    got[b] = max(n, got.get(b, 0))
    return got


def test_exactly_once_survives_kill_9_of_a_spout_task(bittern, tmp_path):
    rows = 200_000
    data = make_dataset(str(tmp_path / "data"), rows, 4)
    out = str(tmp_path / "out")
    p = bittern.popen("run", os.path.join(TOPOLOGIES, "spark_eo_count.py"), "--until-done", "--duration", "200",
                      "--json", "--config", f"spout.spark.path={data}", "--config", f"test.out={out}")
    try:
        def spout_pid():
            procs = bittern.processes("spark_eo_count")
            return procs.get("instance-5", {}).get("pid")

        def committed_some():
            return os.path.isdir(out) and sum(committed_buckets(out).values()) > 0

        deadline = time.monotonic() + 120
        while not committed_some():
            assert p.poll() is None and time.monotonic() < deadline, "no checkpoint committed rows in time"
            time.sleep(0.2)
        pid = spout_pid()
        victim = psutil.Process(pid)
        java = [k.pid for k in victim.children() if k.name() == "java"]
        before = sum(committed_buckets(out).values())
        os.kill(pid, 9)
        stdout, stderr = p.communicate(timeout=220)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, f"{stdout[-2000:]}\n{stderr[-3000:]}"
    assert before < rows, "the spout was killed after everything was committed: not mid-run"
    got = committed_buckets(out)
    assert got == {b: rows // 100 for b in range(100)}, (sum(got.values()), stderr[-2000:])
    assert not alive(java), "the killed spout's JVM did not exit"
    print(f"killed the spout at {before} committed rows of {rows}")
