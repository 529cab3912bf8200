"""End-to-end semantics of every grouping, with real processes in 2 containers.

One run of ``tests/topologies/groupings_e2e.py`` (39 tasks, ``topology.stmgrs=2``)
through ``bittern run`` is shared by every test of this module. Each task journals
what it received, emitted and what ``emit`` returned (see ``groupings_kit``); the
tests compare those journals with what each grouping promises. The module fixture
checks right after the run that no process of the topology is left, and every
test checks it again when it ends.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict

import psutil
import pytest

from conftest import ROOT, TOPOLOGIES, processes_of

if TOPOLOGIES not in sys.path:
    sys.path.insert(0, TOPOLOGIES)

from bittern.loader import load_topology  # noqa: E402
from bittern.packing import round_robin  # noqa: E402
from groupings_kit import ModuloGrouping  # noqa: E402
from instance.grouping import FieldsChooser, PartialKeyChooser  # noqa: E402

TOPOLOGY = os.path.join(TOPOLOGIES, "groupings_e2e.py")
NAME = "groupings_e2e"
COUNT = 1200  # the topology's test.count
KEYS = 13  # the topology's test.keys
DURATION = 4.0
TICK_SECS = 1
RUN_TIMEOUT = 120.0

DEFAULT_SUBSCRIBERS = ["fields_sink", "all_sink", "global_sink", "shuffle_sink", "none_sink",
                       "local_sink", "local_one", "custom_cls", "custom_obj", "pk_sink", "director"]


class Run:
    """What one run left behind: CLI output, the assignment, and every task's journal."""

    def __init__(self, home, out):
        self.home = home
        self.out = out
        self.rc = None
        self.stdout = self.stderr = ""
        self.summary = None
        self.assignment = None
        self.leaked = []
        self.meta = {}  # task -> meta record
        self.recv = defaultdict(list)  # component -> [recv record]
        self.ticks = defaultdict(list)  # component -> [tick record]
        self.sent = defaultdict(list)  # component -> [sent record (+ "task")]
        self.prepare_notes = []

    def load_journals(self):
        if not os.path.isdir(self.out):
            return
        for fname in sorted(os.listdir(self.out)):
            path = os.path.join(self.out, fname)
            if fname.startswith("prepare-"):
                with open(path) as f:
                    self.prepare_notes.append(json.load(f))
                continue
            if not fname.endswith(".jsonl"):
                continue
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
            meta = recs[0]
            assert meta["kind"] == "meta", f"{fname} does not start with its meta record"
            self.meta[meta["task"]] = meta
            for r in recs[1:]:
                if r["kind"] == "recv":
                    self.recv[meta["component"]].append(r)
                elif r["kind"] == "tick":
                    self.ticks[meta["component"]].append(r)
                elif r["kind"] == "sent":
                    self.sent[meta["component"]].append(dict(r, task=meta["task"]))

    def describe(self):
        return (f"bittern run exited {self.rc}\n--- stdout (tail) ---\n{self.stdout[-3000:]}\n"
                f"--- stderr (tail) ---\n{self.stderr[-3000:]}")


def _start(home, out):
    env = dict(os.environ, BITTERN_HOME=home, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "bittern", "run", TOPOLOGY, "--duration", str(DURATION),
           "--config", f"test.out={out}", "--json"]
    stdout = open(os.path.join(os.path.dirname(home), "cli.stdout"), "w+")
    stderr = open(os.path.join(os.path.dirname(home), "cli.stderr"), "w+")
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, text=True, cwd=ROOT)
    return proc, stdout, stderr


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("groupings_e2e")
    home, out = str(base / "home"), str(base / "out")
    os.makedirs(home)
    r = Run(home, out)
    proc, so, se = _start(home, out)
    assign_path = os.path.join(home, "state", "assignments", f"{NAME}.json")
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if r.assignment is None and os.path.exists(assign_path):
                try:  # the packing the CLI recorded, read while the topology runs
                    with open(assign_path) as f:
                        r.assignment = json.load(f)
                except (OSError, ValueError):
                    pass
            time.sleep(0.05)
    finally:
        if proc.poll() is None:  # hung: stop the CLI (it stops its supervisor)
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        r.rc = proc.returncode
        so.seek(0)
        se.seek(0)
        r.stdout, r.stderr = so.read(), se.read()
        so.close()
        se.close()
        # The leak check for the run itself: nothing of this topology may survive the CLI.
        leaked = processes_of(home)
        r.leaked = [f"{p.pid} {' '.join(p.info['cmdline'] or [])[:160]}" for p in leaked]
        for p in leaked:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{\"topology\"")]
    if lines:
        r.summary = json.loads(lines[-1])
    r.load_journals()
    return r


@pytest.fixture(autouse=True)
def _no_process_left(run):
    yield
    assert not run.leaked, "the run left processes behind: " + "; ".join(run.leaked)
    left = processes_of(run.home)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, "processes of the topology are still alive: " + ", ".join(str(p.pid) for p in left)


@pytest.fixture
def ok(run):
    """The run, once it is known to have completed cleanly."""
    assert run.rc == 0 and run.summary is not None, run.describe()
    return run


@pytest.fixture(scope="module")
def tdef():
    return load_topology(TOPOLOGY)


@pytest.fixture(scope="module")
def packing(tdef):
    """The packing computed the way the CLI does: components sorted by name, task ids
    from 1, dealt round-robin over topology.stmgrs containers."""
    return round_robin({c.name: c.par for c in tdef.components.values()}, 2)


# --- helpers ---------------------------------------------------------------------------

def ns(recs):
    return Counter(r["values"][0] for r in recs)


def by_task(recs):
    out = defaultdict(list)
    for r in recs:
        out[r["task"]].append(r)
    return out


def assert_each_once(recs, expected_ns, what):
    got = ns(recs)
    dup = sorted(n for n, c in got.items() if c > 1)
    missing = sorted(set(expected_ns) - set(got))
    extra = sorted(set(got) - set(expected_ns))
    assert not dup and not missing and not extra, (
        f"{what}: {len(dup)} duplicated (first {dup[:5]}), {len(missing)} missing (first {missing[:5]}), "
        f"{len(extra)} unexpected (first {extra[:5]})")
    assert sum(got.values()) == len(expected_ns)


def from_src(recs, stream="default"):
    return [r for r in recs if r["src"] == "src" and r["stream"] == stream]


# --- the run itself ----------------------------------------------------------------------

def test_run_completes_and_summary_matches_journals(ok, packing):
    s = ok.summary
    assert s["drained"] is True, ok.describe()
    assert s["stmgr_dropped"] == 0
    rows = {c["component"]: c for c in s["components"]}
    assert set(rows) == set(packing.component_tasks)
    for name, row in rows.items():
        assert row["errors"] == 0 and row["failed"] == 0, row
        assert row["tasks"] == len(packing.component_tasks[name])
    # every task journaled, exactly once
    assert sorted(ok.meta) == sorted(packing.task_component)
    for name, row in rows.items():
        if row["kind"] == "bolt":
            assert row["executed"] == len(ok.recv[name]), name
    src = rows["src"]
    assert src["emitted"] == 2 * COUNT  # every n on default, plus on evens or odds
    assert src["transferred"] == sum(len(r["tasks"]) for r in ok.sent["src"])
    assert rows["director"]["emitted"] == COUNT == len(ok.sent["director"])


def test_packing_matches_round_robin_and_the_instances(ok, packing):
    assert ok.assignment is not None, "the assignment was never seen in the state directory"
    assert ok.assignment["packing"] == json.loads(json.dumps(packing.to_dict()))
    assert sorted(packing.containers) == [0, 1]
    task_container = packing.task_container
    for task, meta in ok.meta.items():
        assert meta["component"] == packing.task_component[task]
        assert meta["index"] == packing.task_index[task]
        assert meta["container"] == task_container[task], meta
    assert len({m["pid"] for m in ok.meta.values()}) == len(ok.meta), "tasks share a process"
    # the spout has a task in each container, so every grouping below crosses containers
    assert sorted(task_container[t] for t in packing.component_tasks["src"]) == [0, 1]


# --- groupings ------------------------------------------------------------------------------

def test_fields_grouping_each_key_on_one_task(ok, packing):
    recs = ok.recv["fields_sink"]
    assert_each_once(recs, range(COUNT), "fields_sink")
    tasks = packing.component_tasks["fields_sink"]
    key_tasks = defaultdict(set)
    key_emitters = defaultdict(set)
    for r in recs:
        assert r["by_name"] == {"n": r["values"][0], "key": r["values"][1]}
        assert r["values"][1] == f"k{r['values'][0] % KEYS}"
        key_tasks[r["values"][1]].add(r["task"])
        key_emitters[r["values"][1]].add(r["src_task"])
    assert len(key_tasks) == KEYS
    split = {k: sorted(t) for k, t in key_tasks.items() if len(t) != 1}
    assert not split, f"keys seen by more than one task: {split}"
    # both spout tasks (one per container) emitted every key, and agreed on its task
    assert all(e == set(packing.component_tasks["src"]) for e in key_emitters.values())
    ref = FieldsChooser(tasks, [1])
    for k, t in key_tasks.items():
        assert t == {ref.task_for(k)}, (k, t)
    assert {t for ts in key_tasks.values() for t in ts} == set(tasks)


def test_all_grouping_every_task_sees_every_tuple(ok, packing):
    recs = by_task(ok.recv["all_sink"])
    tasks = packing.component_tasks["all_sink"]
    assert sorted(recs) == tasks
    for t in tasks:
        assert_each_once(recs[t], range(COUNT), f"all_sink task {t}")
    assert len(ok.recv["all_sink"]) == len(tasks) * COUNT


def test_global_grouping_only_lowest_task(ok, packing):
    tasks = packing.component_tasks["global_sink"]
    recs = by_task(ok.recv["global_sink"])
    assert sorted(recs) == [min(tasks)], {t: len(v) for t, v in recs.items()}
    assert_each_once(recs[min(tasks)], range(COUNT), "global_sink lowest task")


@pytest.mark.parametrize("component", ["shuffle_sink", "none_sink"])
def test_shuffle_and_none_spread_over_all_tasks(ok, packing, component):
    recs = ok.recv[component]
    assert_each_once(recs, range(COUNT), component)
    tasks = packing.component_tasks[component]
    per_task = {t: len(v) for t, v in by_task(recs).items()}
    assert sorted(per_task) == tasks
    fair = COUNT / len(tasks)
    for t, c in per_task.items():
        assert 0.75 * fair <= c <= 1.25 * fair, f"{component} task {t} got {c} of {COUNT}: {per_task}"
    # each spout task (one per container) spreads its own tuples over every task too
    for s in packing.component_tasks["src"]:
        assert {r["task"] for r in recs if r["src_task"] == s} == set(tasks)


def test_local_or_shuffle_stays_in_container(ok, packing):
    tc = packing.task_container
    tasks = packing.component_tasks["local_sink"]
    recs = ok.recv["local_sink"]
    assert_each_once(recs, range(COUNT), "local_sink")
    for s in packing.component_tasks["src"]:
        local = {t for t in tasks if tc[t] == tc[s]}
        assert local, "the target must have a task in each container for this test"
        mine = [r for r in recs if r["src_task"] == s]
        assert len(mine) == COUNT // 2
        got = Counter(r["task"] for r in mine)
        assert set(got) == local, f"spout task {s} (container {tc[s]}) sent to {dict(got)}, local {local}"
        fair = len(mine) / len(local)
        assert all(0.75 * fair <= c <= 1.25 * fair for c in got.values()), dict(got)


def test_local_or_shuffle_falls_back_to_remote_tasks(ok, packing):
    """A target with no task in the emitter's container still gets its tuples."""
    tc = packing.task_container
    (only,) = packing.component_tasks["local_one"]
    srcs = packing.component_tasks["src"]
    assert {tc[s] for s in srcs} == {0, 1} and tc[only] in (0, 1)
    recs = ok.recv["local_one"]
    assert_each_once(recs, range(COUNT), "local_one")
    assert Counter(r["src_task"] for r in recs) == {s: COUNT // 2 for s in srcs}
    assert all(r["task"] == only for r in recs)


@pytest.mark.parametrize("component,offset", [("custom_cls", 0), ("custom_obj", 1)])
def test_custom_grouping_goes_where_choose_tasks_says(ok, packing, component, offset):
    tasks = packing.component_tasks[component]
    ref = ModuloGrouping(offset)
    ref.prepare(None, "src", "default", list(tasks))
    expected = Counter()
    for n in range(COUNT):
        for t in ref.choose_tasks([n, f"k{n % KEYS}"]):
            expected[(n, t)] += 1
    got = Counter((r["values"][0], r["task"]) for r in ok.recv[component])
    assert got == expected, (f"{component}: {len(got - expected)} unexpected deliveries "
                             f"(first {sorted(got - expected)[:5]}), {len(expected - got)} missing "
                             f"(first {sorted(expected - got)[:5]})")
    # the three kinds of answers were all exercised: nowhere, one task, two tasks
    assert sum(1 for n in range(COUNT) if n % 10 == 0) == COUNT // 10
    assert not any(n % 10 == 0 for n, _ in got)
    assert sum(1 for (n, _t) in got if n % 10 == 5) == 2 * (COUNT // 10)
    # prepare(context, component, stream, target_tasks) ran in each emitting task
    notes = sorted((n for n in ok.prepare_notes if n["offset"] == offset), key=lambda n: n["emitter_task"])
    assert [n["emitter_task"] for n in notes] == packing.component_tasks["src"], \
        f"prepare() notes of offset {offset}: {notes}"
    for n in notes:
        assert (n["emitter"], n["component"], n["stream"]) == ("src", "src", "default"), n
        assert sorted(n["target_tasks"]) == tasks, n


def test_partial_key_two_candidates_per_key(ok, packing):
    tasks = packing.component_tasks["pk_sink"]
    recs = ok.recv["pk_sink"]
    assert_each_once(recs, range(COUNT), "pk_sink")
    ref = PartialKeyChooser(tasks, [1])
    key_tasks = defaultdict(set)
    for r in recs:
        key_tasks[r["values"][1]].add(r["task"])
    assert len(key_tasks) == KEYS
    for key, seen in key_tasks.items():
        a, b = ref.candidates((key,))
        cands = {ref.tasks[a], ref.tasks[b]}
        assert len(seen) <= 2, (key, seen)
        assert seen <= cands, f"key {key!r} went to {sorted(seen)}, candidates {sorted(cands)}"
    # the load balancing is real: some key was split over its two candidates
    assert any(len(s) == 2 for s in key_tasks.values()), dict(key_tasks)
    assert {t for s in key_tasks.values() for t in s} == set(tasks)


def test_direct_grouping_delivers_to_the_chosen_task(ok, packing):
    tc = packing.task_container
    targets = packing.component_tasks["direct_sink"]
    assert_each_once(ok.recv["director"], range(COUNT), "director (shuffle from src)")
    recs = ok.recv["direct_sink"]
    assert_each_once(recs, range(COUNT), "direct_sink")
    for r in recs:
        n, target = r["values"]
        assert r["src"] == "director" and r["stream"] == "targeted"
        assert target == targets[n % len(targets)]
        assert r["task"] == target, f"n={n} sent to task {target} arrived at task {r['task']}"
    assert {r["task"] for r in recs} == set(targets)
    crossed = sum(1 for r in recs if tc[r["src_task"]] != tc[r["task"]])
    stayed = len(recs) - crossed
    assert crossed > 0 and stayed > 0, (crossed, stayed)
    for s in ok.sent["director"]:
        assert s["tasks"] == [targets[s["n"] % len(targets)]], s


def test_need_task_ids_returns_where_tuples_went(ok, packing):
    all_recv = [r for comp in ok.recv.values() for r in comp]
    arrived = defaultdict(Counter)  # (emitter component, stream, n) -> Counter(task)
    for r in all_recv:
        arrived[(r["src"], r["stream"], r["values"][0])][r["task"]] += 1
    returned = {}
    for comp in ("src", "director"):
        for s in ok.sent[comp]:
            assert isinstance(s["tasks"], list) and all(isinstance(t, int) for t in s["tasks"]), s
            key = (comp, s["stream"], s["n"])
            assert key not in returned, f"{key} emitted twice"
            returned[key] = Counter(s["tasks"])
    assert len(returned) == 2 * COUNT + COUNT
    bad = [(k, dict(v), dict(arrived.get(k, {}))) for k, v in returned.items() if arrived.get(k, Counter()) != v]
    assert not bad, f"{len(bad)} emits whose returned task ids differ from the arrivals, e.g. {bad[:3]}"
    assert set(arrived) <= set(returned)
    # on default, the ids returned cover every subscribing component
    tcomp = packing.task_component
    for (comp, stream, n), tasks in returned.items():
        if comp == "src" and stream == "default":
            comps = Counter(tcomp[t] for t in tasks.elements())
            assert comps["all_sink"] == 3 and comps["global_sink"] == 1 and comps["fields_sink"] == 1
            assert comps["custom_cls"] == (0 if n % 10 == 0 else 2 if n % 10 == 5 else 1)


def test_multi_stream_subscribers_see_only_their_stream(ok, packing):
    evens, odds = range(0, COUNT, 2), range(1, COUNT, 2)
    ev = ok.recv["evens_sink"]
    assert Counter(r["stream"] for r in ev) == {"evens": COUNT // 2}
    assert_each_once(ev, evens, "evens_sink")
    assert all(r["by_name"] == {"n": r["values"][0], "key": f"k{r['values'][0] % KEYS}"} for r in ev)
    od = ok.recv["odds_sink"]
    assert Counter(r["stream"] for r in od) == {"odds": COUNT // 2}
    assert_each_once(od, odds, "odds_sink")
    assert all(r["by_name"] == {"n": r["values"][0], "sq": r["values"][0] ** 2} for r in od)
    sq_tasks = defaultdict(set)  # fields grouping on the odds stream's own field
    for r in od:
        sq_tasks[r["by_name"]["sq"]].add(r["task"])
    assert all(len(t) == 1 for t in sq_tasks.values())
    assert {r["task"] for r in od} == set(packing.component_tasks["odds_sink"])
    # a bolt subscribed to both streams gets both, each with its own stream name and schema
    both = ok.recv["both_sink"]
    assert_each_once([r for r in both if r["stream"] == "evens"], evens, "both_sink evens")
    assert_each_once([r for r in both if r["stream"] == "odds"], odds, "both_sink odds")
    assert len(both) == COUNT
    for r in both:
        assert set(r["by_name"]) == ({"n", "key"} if r["stream"] == "evens" else {"n", "sq"})
    tb = ok.recv["tick_bolt"]
    assert Counter(r["stream"] for r in tb) == {"evens": COUNT // 2}
    assert_each_once(tb, evens, "tick_bolt")
    # and the subscribers of default never see the named streams
    for comp in DEFAULT_SUBSCRIBERS:
        assert {(r["src"], r["stream"]) for r in ok.recv[comp]} == {("src", "default")}, comp


def test_tick_tuples_reach_process_tick(ok, packing):
    ticks = ok.ticks["tick_bolt"]
    assert len(ticks) >= 3, f"{len(ticks)} tick(s) in a {DURATION:g}s run at {TICK_SECS}s"
    for t in ticks:
        assert t["is_tick"] is True and t["component"] == "__system" and t["stream"] == "__tick"
        assert t["values"] == [TICK_SECS]
    times = [t["time"] for t in ticks]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g > 0 for g in gaps), gaps
    # on average one tick per period: not faster, and not much slower on a busy machine
    assert 0.9 * TICK_SECS <= sum(gaps) / len(gaps) <= 2.0 * TICK_SECS, gaps
    # ticks go to process_tick only, and only to the component configured for them
    assert not any(r["is_tick"] for comp in ok.recv.values() for r in comp)
    assert {c: len(v) for c, v in ok.ticks.items() if v} == {"tick_bolt": len(ticks)}
