"""ParquetSink in-process: every crash point of the two-phase commit (the generic tests of
tests/unit/test_sinks.py, run again over Parquet), what readers see (pyarrow.dataset skips
what Spark skips: names starting with . or _), row groups, Hive partitions, schemas and
their one-line errors, and ParquetSinkBolt outside exactly once."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from bittern.api.tuple import Tuple
from bittern.errors import SchemaError
from bittern.sinks import ParquetSchemaError, ParquetSink, ParquetSinkBolt, SinkError
from bittern.sinks.parquet_types import check_writable, hive_escape

from . import test_sinks as generic

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")

COLUMNS = generic.COLUMNS


def ctx(task, component="out"):
    return SimpleNamespace(task_id=task, topology_name="topo", component=component)


class ParquetKit:
    kind = "parquet"

    def __init__(self, root, row_group_rows):
        self.dir = str(root / "out")
        self.row_group_rows = row_group_rows
        # staged rows reach the disk once a row group is full (recover reports them aborted)
        self.durable_staging = row_group_rows <= 2

    def make(self, task=1, **kw):
        s = ParquetSink(self.dir, "part", fields=COLUMNS, row_group_rows=self.row_group_rows, **kw)
        s.open(ctx(task), {})
        return s

    def visible(self):
        rows = []
        for name in sorted(os.listdir(self.dir)):
            if name.startswith("part-") and name.endswith(".parquet"):
                t = pq.read_table(os.path.join(self.dir, name))
                rows.extend(zip(*(t.column(c).to_pylist() for c in COLUMNS)))
        return rows

    def leftovers(self):
        return sorted(n for n in os.listdir(self.dir) if n.startswith("."))


@pytest.fixture(params=[2, 65536], ids=["groups-of-2", "one-group"])
def kit(request, tmp_path):
    return ParquetKit(tmp_path, request.param)


# the generic crash-point tests, with this module's `kit`
RANDOM = "test_random_crashes_deliver_every_item_exactly_once"
for _name in dir(generic):
    _code = getattr(generic.__dict__[_name], "__code__", None)
    if _name.startswith("test_") and _name != RANDOM and "kit" in _code.co_varnames[:_code.co_argcount]:
        globals()[_name] = generic.__dict__[_name]


@pytest.mark.parametrize("seed", range(4))
def test_random_crashes_deliver_every_item_exactly_once(kit, seed):
    generic.__dict__[RANDOM](kit, seed)


def visible_dataset(directory, **kw):
    """What a reader of the directory gets (pyarrow.dataset ignores . and _ names, as Spark does)."""
    part = ds.HivePartitioning.discover(null_fallback="__HIVE_DEFAULT_PARTITION__")
    return ds.dataset(directory, format="parquet", partitioning=part, **kw).to_table()


def fresh(tmp_path, task=1, component="out", **kw):
    kw.setdefault("fields", ["id", "user", "amount"])
    s = ParquetSink(str(tmp_path / "out"), "part", **kw)
    s.open(ctx(task, component), {})
    s.recover([], None)
    return s


def test_names_contents_and_what_readers_see(tmp_path):
    s = fresh(tmp_path, task=7, row_group_rows=10)
    out = tmp_path / "out"
    for i in range(25):
        s.write(1, [i, f"u{i % 3}", i * 10])
    assert s.buffered_rows == 5                      # two row groups of 10 written, 5 rows in memory
    assert os.listdir(out) == [".staging-part-1-7.parquet"]
    assert visible_dataset(str(out)).num_rows == 0  # staged: not listed
    s.pre_commit(1)
    assert os.listdir(out) == [".pending-part-1-7.parquet"]
    assert visible_dataset(str(out)).num_rows == 0  # pre-committed: still not listed
    s.write(2, [99, "x", None])
    s.commit(1)
    assert sorted(os.listdir(out)) == ["part-1-7.parquet"]  # (2's 1 row is still in memory)
    f = pq.ParquetFile(str(out / "part-1-7.parquet"))
    assert f.metadata.num_row_groups == 3 and f.metadata.num_rows == 25
    assert f.schema_arrow == pa.schema([("id", pa.int64()), ("user", pa.string()), ("amount", pa.int64())])
    t = visible_dataset(str(out))
    assert t.column("id").to_pylist() == list(range(25))
    assert s.committed_files() == [str(out / "part-1-7.parquet")]
    s.pre_commit(2)
    s.commit(2)
    assert visible_dataset(str(out)).num_rows == 26
    s.close()


def test_hive_partitions_keep_partition_fields_out_of_the_files(tmp_path):
    s = fresh(tmp_path, fields=["day", "user", "n"], partition_by=["day"], row_group_rows=4)
    days = ["2026-11-26", "2026-11-27", None, "a/b=c"]
    for i in range(40):
        s.write(1, [days[i % 4], f"u{i}", i])
    assert s.buffered_rows < 4                     # bounded across partitions
    s.pre_commit(1)
    s.commit(1)
    out = tmp_path / "out"
    assert sorted(os.listdir(out)) == ["day=2026-11-26", "day=2026-11-27", "day=__HIVE_DEFAULT_PARTITION__",
                                       "day=a%2Fb%3Dc"]
    for d in os.listdir(out):
        assert os.listdir(out / d) == ["part-1-1.parquet"]
        assert pq.read_schema(str(out / d / "part-1-1.parquet")).names == ["user", "n"]
    t = visible_dataset(str(out))
    got = sorted(zip(t.column("day").to_pylist(), t.column("n").to_pylist()), key=lambda r: r[1])
    assert [n for _, n in got] == list(range(40))
    assert {d for d, _ in got} == {"2026-11-26", "2026-11-27", None, "a/b=c"}
    assert hive_escape("") == "__HIVE_DEFAULT_PARTITION__" and hive_escape(True) == "true"


def test_a_commit_interrupted_between_partitions_is_finished_by_recover(tmp_path):
    s = fresh(tmp_path, fields=["day", "n"], partition_by="day")
    for i in range(6):
        s.write(1, [f"d{i % 3}", i])
    s.pre_commit(1)
    pending = sorted(s._pending[1])
    final = os.path.join(os.path.dirname(pending[0]), "part-1-1.parquet")
    os.replace(pending[0], final)                  # died after renaming the first partition's file
    del s
    s = ParquetSink(str(tmp_path / "out"), "part", fields=["day", "n"], partition_by="day")
    s.open(ctx(1), {})
    report = s.recover([1], 1)
    assert report.committed == [1]
    assert sorted(visible_dataset(str(tmp_path / "out")).column("n").to_pylist()) == list(range(6))
    assert not [f for _, _, fs in os.walk(tmp_path / "out") for f in fs if f.startswith(".")]


def test_a_value_of_another_type_is_one_line_naming_the_component_and_field(tmp_path):
    s = fresh(tmp_path, component="daily", row_group_rows=3)
    for i in range(4):
        s.write(1, [i, "u", 5])
    with pytest.raises(ParquetSchemaError) as e:
        s.write(1, [4, "u", "five"])
    msg = str(e.value)
    assert isinstance(e.value, SchemaError) and "\n" not in msg
    assert "'daily'" in msg and "field 'amount'" in msg and "int64" in msg and "'five'" in msg, msg
    with pytest.raises(ParquetSchemaError, match="field 'amount'"):
        s.pre_commit(1)                           # nothing of checkpoint 1 can become visible
    assert not [n for n in os.listdir(tmp_path / "out") if not n.startswith(".")]
    s.abort(1)                                    # (the runtime rolls back) ...
    assert os.listdir(tmp_path / "out") == []
    s.write(1, [0, "u", 1])                       # ... and the replay without the bad row commits
    s.pre_commit(1)
    s.commit(1)
    assert visible_dataset(str(tmp_path / "out")).num_rows == 1


def test_type_rules(tmp_path):
    s = fresh(tmp_path, fields=["x", "f", "b", "s"])
    s.write(1, [1, 1.5, True, None])
    s.write(1, [2, 3, False, "a"])                # an int into a double column is fine
    for bad, field in (([1.5, 1.0, True, "a"], "x"), ([True, 1.0, True, "a"], "x"),
                       ([1, "1", True, "a"], "f"), ([1, 1.0, 1, "a"], "b"), ([1, 1.0, True, b"a"], "s")):
        with pytest.raises(ParquetSchemaError, match=f"field '{field}'"):
            s.write(2, bad)
    with pytest.raises(ParquetSchemaError, match="3 values for 4 fields"):
        s.write(2, [1, 2.0, True])
    s.abort(2)                                    # (the rollback a refused row leads to)
    s.write(2, [1 << 70, 1.0, True, "a"])          # out of int64's range: found when the group is built
    with pytest.raises(ParquetSchemaError, match="field 'x' is int64, and a value does not fit"):
        s.pre_commit(2)


def test_declared_schema_types_converts_and_refuses(tmp_path):
    schema = {"id": "int32", "day": "date", "at": "timestamp", "amount": "double", "tags": pa.list_(pa.string())}
    fields = ["id", "day", "at", "amount", "tags", "note"]
    s = fresh(tmp_path, fields=fields, schema=schema)
    s.write(1, [1, "2026-11-26", "2026-11-26T10:00:00+01:00", 2, ["a"], None])
    s.write(1, [2, None, "2026-11-26T09:30:00", 2.5, [], None])
    s.pre_commit(1)
    s.commit(1)
    t = visible_dataset(str(tmp_path / "out"))
    assert t.schema.field("id").type == pa.int32() and t.schema.field("day").type == pa.date32()
    assert t.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert t.schema.field("note").type == pa.string()          # no value ever: string
    assert [str(v) for v in t.column("at").to_pylist()] == ["2026-11-26 09:00:00+00:00",
                                                             "2026-11-26 09:30:00+00:00"]
    with pytest.raises(ParquetSchemaError, match="field 'id' is int32, got 'x'"):
        s.write(2, ["x", None, None, None, None, None])
    with pytest.raises(ParquetSchemaError, match="field 'day'"):
        s.write(2, [1, "26/11/2026", None, None, None, None])
    with pytest.raises(ParquetSchemaError, match="out of the int32 range"):
        s.write(2, [1 << 40, None, None, None, None, None])


def test_bad_schemas_are_refused_at_open(tmp_path):
    with pytest.raises(ParquetSchemaError, match="field 'amount': unknown type 'money'"):
        fresh(tmp_path, schema={"amount": "money"})
    with pytest.raises(ParquetSchemaError, match="declares field 'total', which is not a field"):
        fresh(tmp_path, schema={"total": "int64"})
    with pytest.raises(ParquetSchemaError, match="partition field 'day' is not a field"):
        fresh(tmp_path, partition_by=["day"])
    with pytest.raises(ParquetSchemaError, match="pass fields="):
        s = ParquetSink(str(tmp_path / "o"))
        s.open(SimpleNamespace(task_id=1, component="out", get_this_sources=lambda: {},
                               get_component_outputs=lambda c: {}), {})
    for bad in ("", "a/b", ".x", "_x"):
        with pytest.raises(SinkError, match="prefix"):
            ParquetSink(str(tmp_path), bad)


def test_fields_come_from_the_input_stream(tmp_path):
    c = SimpleNamespace(task_id=3, component="out", get_this_sources=lambda: {("agg", "default"): None},
                        get_component_outputs=lambda comp: {"default": ["k", "v"]})
    s = ParquetSink(str(tmp_path / "o"))
    s.open(c, {})
    assert s.columns == ["k", "v"]


def test_a_restarted_task_keeps_the_types_of_committed_files(tmp_path):
    s = fresh(tmp_path, fields=["id", "user", "amount"])
    s.write(1, [1, "u", None])
    s.write(1, [2, "u", 2.5])
    s.pre_commit(1)
    s.commit(1)
    s.close()
    s = ParquetSink(str(tmp_path / "out"), "part", fields=["id", "user", "amount"])
    s.open(ctx(2), {})                             # another task, or a new incarnation
    s.recover([1], 1)
    s.write(2, [3, "v", 7])                        # would infer int64; the file says double
    s.pre_commit(2)
    s.commit(2)
    assert visible_dataset(str(tmp_path / "out")).schema.field("amount").type == pa.float64()


def test_output_directory_not_writable_is_one_line_naming_it(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(SinkError) as e:
        ParquetSink(str(blocker / "out"), fields=["a"]).open(ctx(1, "daily"), {})
    assert str(e.value) == (f"ParquetSink 'daily': output directory {blocker / 'out'} cannot be created: "
                            f"{blocker} is not a directory")
    check_writable(str(tmp_path / "new" / "deeper"))  # creatable: fine, and not created by the check
    assert not (tmp_path / "new").exists()
    ro = "/sys/fs"
    try:
        check_writable(ro)
    except SinkError as e2:
        assert str(e2).startswith(f"ParquetSink: output directory {ro} is not writable"), e2
    else:
        pytest.skip(f"{ro} is writable here")


class Daily(ParquetSinkBolt):
    fields = ["day", "id"]
    partition_by = ["day"]
    schema = {"id": "int64"}


def test_sink_bolt_outside_exactly_once_rolls_files_then_acks(tmp_path):
    conf = {"sink.parquet.dir": str(tmp_path / "out"), "topology.reliability.mode": "ATLEAST_ONCE",
            "sink.parquet.roll.rows": 4, "sink.parquet.roll.seconds": 60, "topology.message.timeout.secs": 30}
    acked, failed = [], []
    bolt = Daily()
    bolt.ack, bolt.fail = acked.append, failed.append
    bolt.initialize(conf, ctx(2))
    assert bolt._every == 10.0                      # a third of the message timeout
    tups = [Tuple(None, "src", "default", 1, [f"d{v % 2}", v]) for v in range(6)]
    for t in tups[:3]:
        bolt.process(t)
    assert acked == [] and visible_dataset(str(tmp_path / "out")).num_rows == 0
    bolt.process(tups[3])                           # the 4th row rolls the file: committed, then acked
    assert acked == tups[:4]
    assert sorted(visible_dataset(str(tmp_path / "out")).column("id").to_pylist()) == [0, 1, 2, 3]
    bolt.process(tups[4])
    assert bolt._runtime_flush(now=bolt._since + 11.0) > 0   # the time roll
    assert acked == tups[:5]
    bolt.process(tups[5])                           # staged, never committed: "killed"
    again = Daily()
    again.ack, again.fail = acked.append, failed.append
    again.initialize(conf, ctx(2))
    assert again._next == 3
    again.close()
    assert sorted(visible_dataset(str(tmp_path / "out")).column("id").to_pylist()) == [0, 1, 2, 3, 4]
    assert failed == []


def test_sink_bolt_fails_a_group_whose_file_cannot_be_committed(tmp_path):
    conf = {"sink.parquet.dir": str(tmp_path / "out"), "topology.reliability.mode": "ATLEAST_ONCE",
            "sink.parquet.roll.rows": 3}
    acked, failed = [], []
    bolt = Daily()
    bolt.ack, bolt.fail = acked.append, failed.append
    bolt.initialize(conf, ctx(1))
    good = [Tuple(None, "src", "default", 1, ["d", v]) for v in range(2)]
    for t in good:
        bolt.process(t)
    with pytest.raises(ParquetSchemaError, match="field 'id'"):
        bolt.process(Tuple(None, "src", "default", 1, ["d", "three"]))
    bolt._flush_sink()
    assert failed == good and acked == []           # failed, so replayed; nothing visible
    assert visible_dataset(str(tmp_path / "out")).num_rows == 0


def test_preflight(tmp_path):
    Daily.preflight({"sink.parquet.dir": str(tmp_path / "x")})
    with pytest.raises(SinkError, match="no output directory"):
        Daily.preflight({})
    (tmp_path / "f").write_text("")
    with pytest.raises(SinkError, match="cannot be created"):
        Daily.preflight({"sink.parquet.dir": str(tmp_path / "f" / "out")})

    class Bad(Daily):
        schema = {"id": "long long"}
    with pytest.raises(ParquetSchemaError, match="field 'id': unknown type 'long long'"):
        Bad.preflight({"sink.parquet.dir": str(tmp_path / "x")})


# -- through bittern.testing (the engine's own instance code, in this process) ---------------

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_parquet_sink_bolt_in_a_whole_topology_at_least_once(tmp_path):
    from bittern.testing import complete_topology
    out = tmp_path / "sink"
    rows = [[n, n % 7] for n in range(500)]
    r = complete_topology(os.path.join(ROOT, "tests", "topologies", "parquet_modes.py"), sources={"spout": rows},
                          config={"test.out": str(tmp_path / "w"), "test.count": 500, "sink.parquet.dir": str(out),
                                  "sink.parquet.roll.rows": 100})
    assert sorted(r.acked["spout"]) == list(range(500))       # acked once committed
    t = visible_dataset(str(out))
    assert sorted(t.column("n").to_pylist()) == list(range(500))
    assert t.schema.field("mod").type == pa.int64()
    assert not [f for f in os.listdir(out) if f.startswith(".")]


def test_the_pipelines_spend_bolt_emits_running_totals_at_each_checkpoint():
    import sys

    from bittern import Grouping
    from bittern.testing import BoltHarness
    sys.path.insert(0, os.path.join(ROOT, "topologies"))
    try:
        import spark_pipeline as sp
    finally:
        sys.path.remove(os.path.join(ROOT, "topologies"))
    with BoltHarness(sp.Spend, inputs={"events": (["id", "day", "user", "amount"], Grouping.fields("user"))},
                     config={"topology.reliability.mode": "EFFECTIVELY_ONCE"}) as h:
        h.process_many([[0, "d1", "u", 5], [1, "d1", "u", 7], [2, "d2", "u", 1]])
        h.checkpoint(1)
        assert sorted(h.tuples()) == [["d1", "u", 2, 12], ["d2", "u", 1, 1]]
        h.process([3, "d2", "u", 4])
        h.checkpoint(2)
        assert h.tuples()[2:] == [["d2", "u", 2, 5]]
