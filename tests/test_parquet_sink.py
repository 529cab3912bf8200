"""ParquetSink end to end, in real processes: the Spark -> Bittern -> Parquet -> Spark round
trip exact under exactly once with kill -9s of the aggregating bolt and of the sink (read
back by pyarrow and by Spark, topologies/spark_pipeline.py --check); at least once, a sink
killed with kill -9 loses no row; readers never see an incomplete file while the
topology writes; bad input refused in one line naming the thing.
(In-process crash points, schemas, partitions: tests/unit/test_parquet_sink.py.)"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import EXAMPLES, ROOT, TOPOLOGIES, processes_of, wait_for
from eokit import Gates

import pyarrow as pa  # noqa: E402  (bittern[parquet], installed by scripts/setup.sh: never skipped)
import pyarrow.parquet as pq  # noqa: E402

PIPELINE = os.path.join(TOPOLOGIES, "parquet_pipeline.py")
MODES = os.path.join(TOPOLOGIES, "parquet_modes.py")


def listed(directory):
    """The files a Spark (Hadoop) listing of ``directory`` reads: names not starting with
    ``.`` or ``_``, in directories not starting with them. Also returns the hidden files."""
    shown, hidden = [], []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for f in files:
            (hidden if f.startswith((".", "_")) else shown).append(os.path.join(root, f))
    return sorted(shown), sorted(hidden)


def read_listed(directory):
    """Every listed file read whole (each must be a complete Parquet file), with the
    Hive partition values of its directory added: a list of row dicts."""
    rows = []
    for path in listed(directory)[0]:
        part = dict(seg.split("=", 1) for seg in os.path.relpath(os.path.dirname(path), directory).split(os.sep)
                    if "=" in seg)
        for r in pq.read_table(path).to_pylist():
            rows.append(dict(r, **part))
    return rows


def pid_of(out, name):
    try:
        with open(os.path.join(out, "pids", name)) as f:
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return None


def kill9(out, name):
    """kill -9 the task whose pid file is ``name``; returns its pid."""
    pid = pid_of(out, name)
    assert pid is not None, f"no pid file {name}"
    os.kill(pid, signal.SIGKILL)
    return pid


def stop(p):
    if p.poll() is None:
        p.kill()
    return p.communicate()


# -- exactly once: the round trip -----------------------------------------------------------

def committed_events(out):
    """Events counted in the committed output: each (day, user)'s largest running count."""
    best = {}
    for r in read_listed(out):
        k = (r["day"], r["user"])
        best[k] = max(best.get(k, 0), r["events"])
    return sum(best.values())


@pytest.mark.slow
def test_spark_to_parquet_round_trip_is_exact_under_exactly_once_with_kill_9s(bittern, tmp_path):
    sys.path.insert(0, EXAMPLES)
    try:
        import spark_pipeline as sp
    finally:
        sys.path.remove(EXAMPLES)
    rows = 40_000
    data = sp.generate(str(tmp_path / "events"), rows, 4)
    out, work = str(tmp_path / "daily"), str(tmp_path / "work")
    gates = Gates(tmp_path / "gate", rows, 3)  # the spout emits a third, two, then all
    p = bittern.popen("run", PIPELINE, "--until-done", "--duration", "240", "--config", f"spout.spark.path={data}",
                      "--config", f"sink.parquet.dir={out}", "--config", f"test.out={work}",
                      "--config", "test.rate=800", "--config", gates.config)
    kills = []
    try:
        # kill -9 an aggregating task once output is committed, then a sink task once the
        # topology has rolled back, restarted it and committed more
        for victim, at in (("spend-", rows // 6), ("out-", rows // 2)):
            wait_for(lambda: p.poll() is None and committed_events(out) >= at or p.poll() is not None,
                     timeout=150, interval=0.2, what=f"{at} events committed")
            assert p.poll() is None, "the run ended before the kills"
            name = sorted(n for n in os.listdir(os.path.join(work, "pids")) if n.startswith(victim))[0]
            before = committed_events(out)
            kills.append((name, kill9(work, name), before))
            wait_for(lambda: pid_of(work, name) != kills[-1][1] or p.poll() is not None, timeout=60,
                     what=f"{name} restarted")
            gates.more()
        stdout, stderr = p.communicate(timeout=240)
    finally:
        stop(p)
    assert p.returncode == 0, f"{stdout[-2000:]}\n{stderr[-3000:]}"
    assert all(before < rows for _, _, before in kills), f"killed after the end: {kills}"
    # pyarrow: every (day, user) exact, every running count committed once, no file left hidden
    got = read_listed(out)
    versions = Counter((r["day"], r["user"], r["events"]) for r in got)
    assert max(versions.values()) == 1, f"running counts committed twice: {versions.most_common(3)}"
    want = {}
    for i in range(rows):
        _, day, user, amount = sp.event(i)
        e, t = want.get((day, user), (0, 0))
        want[(day, user)] = (e + 1, t + amount)
    final = {}
    for r in got:
        k = (r["day"], r["user"])
        if r["events"] > final.get(k, (0, 0))[0]:
            final[k] = (r["events"], r["total"])
    assert final == want
    assert listed(out)[1] == [], f"uncommitted files left: {listed(out)[1][:5]}"
    schema = pq.read_schema(listed(out)[0][0])
    assert schema == pa.schema([("user", pa.string()), ("events", pa.int64()), ("total", pa.int64())])
    # Spark: the example's own check, a Spark SQL query over each side
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "spark_pipeline.py"), "--check", out, data],
                       capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith(f"OK: {len(want)} (day, user) results match"), \
        f"{r.stdout}\n{r.stderr[-2000:]}"
    print(f"kills (task, pid, events committed before): {kills}; {r.stdout.strip()}")


# -- at least once --------------------------------------------------------------------------

@pytest.mark.slow
def test_at_least_once_sink_killed_with_kill_9_loses_no_row_and_readers_see_only_whole_files(bittern, tmp_path):
    out, work = str(tmp_path / "sink"), str(tmp_path / "work")
    n = 6000
    p = bittern.popen("run", MODES, "--until-done", "--duration", "150", "--config", f"sink.parquet.dir={out}",
                      "--config", f"test.out={work}", "--config", f"test.count={n}", "--config", "test.rate=600",
                      "--config", "sink.parquet.roll.seconds=1", "--config", "sink.parquet.row.group.rows=50")
    seen_hidden = set()

    def progress(at):
        seen_hidden.update(os.path.basename(h).split("-")[0] for h in listed(out)[1])
        return p.poll() is not None or len(read_listed(out)) >= at  # (reads every listed file whole)
    try:
        wait_for(lambda: progress(1500), timeout=90, interval=0.1, what="1500 committed rows")
        assert p.poll() is None, "the run ended before the kill"
        kill9(work, sorted(f for f in os.listdir(os.path.join(work, "pids")) if f.startswith("out-"))[0])
        while p.poll() is None:
            progress(n + 1)
            time.sleep(0.1)
        stdout, stderr = p.communicate(timeout=200)
    finally:
        stop(p)
    assert p.returncode == 0, stderr[-3000:]
    got = [r["n"] for r in read_listed(out)]
    missing = set(range(n)) - set(got)
    assert not missing, f"{len(missing)} rows lost, e.g. {sorted(missing)[:10]}"
    assert len(got) >= n  # duplicates allowed (replays of what was written but not committed)
    assert all(r["mod"] == r["n"] % 7 for r in read_listed(out))
    assert ".staging" in seen_hidden, "no staged file was ever seen while the topology wrote"
    assert listed(out)[1] == [], f"uncommitted files left: {listed(out)[1][:5]}"


# -- bad input ------------------------------------------------------------------------------

def error_lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


def test_an_output_directory_that_cannot_be_written_is_refused_at_submit(bittern, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    t0 = time.monotonic()
    r = bittern("submit", MODES, "--name", "bad", "--config", f"sink.parquet.dir={blocker / 'out'}",
                "--config", f"test.out={tmp_path / 'w'}", "--config", "test.count=10", timeout=60)
    assert r.returncode != 0 and bittern.state("topologies", "bad") is None
    assert not processes_of(bittern.home), "a refused submit left processes behind"
    assert error_lines(r.stderr) == [f"error: Out: output directory {blocker / 'out'} cannot be created: "
                                     f"{blocker} is not a directory"], r.stderr
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 30


@pytest.mark.slow
def test_a_field_changing_type_mid_stream_fails_the_run_in_one_line_and_commits_nothing_of_it(bittern, tmp_path):
    """The run fails naming the component and the field, and nothing of the failing task's
    group holding the bad row is visible (the other task commits its good rows when it stops)."""
    out = str(tmp_path / "sink")
    r = bittern("run", MODES, "--until-done", "--duration", "60", "--config", f"sink.parquet.dir={out}",
                "--config", f"test.out={tmp_path / 'w'}", "--config", "test.count=3000",
                "--config", "test.bad.at=100", "--config", "sink.parquet.roll.seconds=30",
                "--config", "topology.message.timeout.secs=90", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    m = re.match(r"error: component 'out' task (\d+): ParquetSchemaError: ParquetSink 'out': field 'mod' is "
                 r"int64, got 'bad' \(str\)", lines[0])
    assert m, lines[0]
    shown = listed(out)[0]
    assert not [f for f in shown if f.endswith(f"-{m.group(1)}.parquet")], shown
    assert all(r["mod"] == r["n"] % 7 for r in read_listed(out))
