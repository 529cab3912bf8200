"""The Spark → msgpack type mapping (bittern.spark.typemap), and SparkSpout driven in
this process (shares and ids of a path source, replay, an SQL source split by hash,
a callable source, the exactly-once offset and rewind), with one real local
SparkSession (one JVM) for the whole module."""
from __future__ import annotations

import datetime as dt
import decimal
import os
import sys

import msgpack
import pytest

pytest.importorskip("pyspark")

from bittern.spark.typemap import converter, row_converter  # noqa: E402


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    s = (SparkSession.builder.master("local[1]").appName("bittern-typemap-test")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "512m")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None)
    s.stop()
    if gw is not None:
        gw.shutdown()
        SparkContext._gateway = SparkContext._jvm = None
    if proc is not None:  # the JVM ends on its stdin's EOF
        proc.stdin.close()
        proc.wait(timeout=30)


QUERY = """SELECT
  CAST(1 AS TINYINT) AS b, CAST(2 AS SMALLINT) AS s, 3 AS i, CAST(4 AS BIGINT) AS l,
  true AS t, CAST(1.5 AS FLOAT) AS f, CAST('NaN' AS DOUBLE) AS d, 'fox' AS str,
  CAST('ab' AS CHAR(4)) AS ch, CAST('xy' AS VARCHAR(5)) AS vc, X'0001FF' AS bin,
  CAST('12.340' AS DECIMAL(10, 3)) AS dec, DATE'2024-02-29' AS day,
  TIMESTAMP'2024-02-29 13:45:00.000001' AS ts,
  TIMESTAMP_NTZ'2024-02-29 13:45:00' AS ntz,
  INTERVAL '1 01:00:00' DAY TO SECOND AS dts,
  array(1, NULL, 3) AS arr, array(DATE'2024-01-01') AS arr_dates,
  map('a', 1, 'b', 2) AS m, map(named_struct('a', 1), 'k') AS m_struct_key,
  named_struct('x', 1, 'y', 'b', 'z', CAST('0.5' AS DECIMAL(3, 1))) AS st,
  array(named_struct('n', TIMESTAMP'1970-01-01 00:00:01')) AS arr_st,
  CAST(NULL AS INT) AS null_int, CAST(NULL AS DECIMAL(5, 2)) AS null_dec,
  CAST(NULL AS TIMESTAMP) AS null_ts, CAST(NULL AS ARRAY<INT>) AS null_arr,
  CAST(NULL AS STRUCT<a: INT>) AS null_st, NULL AS null_void
"""


def test_every_documented_type(spark):
    df = spark.sql(QUERY)
    row = df.collect()[0]
    got = dict(zip(df.columns, row_converter(df.schema)(row)))
    nan = got.pop("d")
    assert nan != nan
    assert got == {
        "b": 1, "s": 2, "i": 3, "l": 4, "t": True, "f": 1.5, "str": "fox",
        "ch": "ab", "vc": "xy", "bin": b"\x00\x01\xff",
        "dec": "12.340", "day": "2024-02-29",
        "ts": "2024-02-29T13:45:00.000001+00:00", "ntz": "2024-02-29T13:45:00",
        "dts": 90_000_000_000,
        "arr": [1, None, 3], "arr_dates": ["2024-01-01"],
        "m": {"a": 1, "b": 2}, "m_struct_key": {'{"a":1}': "k"},
        "st": {"x": 1, "y": "b", "z": "0.5"},
        "arr_st": [{"n": "1970-01-01T00:00:01+00:00"}],
        "null_int": None, "null_dec": None, "null_ts": None, "null_arr": None, "null_st": None,
        "null_void": None,
    }
    # msgpack packs and unpacks every value (no default= hook, the receiver's strict defaults)
    packed = msgpack.packb(list(got.values()), use_bin_type=True)
    assert msgpack.unpackb(packed, raw=False)[0] == 1
    assert decimal.Decimal(got["dec"]) == decimal.Decimal("12.340")
    assert dt.datetime.fromisoformat(got["ts"]).tzinfo == dt.timezone.utc


def test_timestamps_do_not_depend_on_the_local_time_zone(spark, monkeypatch):
    df = spark.sql("SELECT TIMESTAMP'2024-07-01 12:00:00' AS ts")
    conv = converter(df.schema.fields[0].dataType)
    values = []
    for tz in ("UTC", "America/New_York", "Asia/Kolkata"):
        monkeypatch.setenv("TZ", tz)
        import time
        time.tzset()
        values.append(conv(df.collect()[0][0]))
    monkeypatch.delenv("TZ")
    import time
    time.tzset()
    assert values == ["2024-07-01T12:00:00+00:00"] * 3


def test_plain_rows_are_copied_as_lists(spark):
    df = spark.sql("SELECT 1 AS a, 'x' AS b")
    conv = row_converter(df.schema)
    assert conv is list
    assert conv(df.collect()[0]) == [1, "x"]


# -- SparkSpout in this process, on the module's session (getOrCreate finds it) ---------------

class Driven:
    """Runs a SparkSpout without a topology: emits are collected, done() is noted."""

    def __init__(self, cls, config=None, index=0, par=1, state=None):
        self.spout = cls()
        self.out, self.ids, self.finished = [], [], False
        self.spout.emit = self.emit
        self.spout._runtime_done = self.done
        self.spout.context = None
        conf = dict({"topology.reliability.mode": "ATLEAST_ONCE"}, **(config or {}))
        ctx = _Ctx(index, par)
        self.spout.initialize(conf, ctx)
        if state is not None:
            self.spout.init_state(state)

    def emit(self, values, tup_id=None, stream="default"):
        self.out.append(values)
        self.ids.append(tup_id)

    def done(self):
        self.finished = True

    def run(self, until=None, timeout=60, ack=False):
        import time
        deadline = time.monotonic() + timeout
        while not self.finished and (until is None or len(self.out) < until):
            assert time.monotonic() < deadline, f"spout not done after {timeout}s ({len(self.out)} rows)"
            if ack:
                self.ack_all()
            n = len(self.out)
            self.spout.next_tuple()
            if len(self.out) == n:
                time.sleep(0.01)
        return self

    def ack_all(self):
        for i in list(self.spout.pending):
            self.spout.ack(i)

    def stop(self):
        self.spout._stop.set()
        if self.spout._thread is not None:
            self.spout._thread.join(timeout=30)


class _Ctx:
    component = "rows"

    def __init__(self, index, par):
        self.task_index, self.task_id, self._par = index, index + 1, par

    def get_component_tasks(self, component):
        return list(range(1, self._par + 1))


def _parquet(tmp_path, rows=300, files=3):
    import pyarrow as pa
    import pyarrow.parquet as pq
    per = rows // files
    for k in range(files):
        ids = list(range(k * per, (k + 1) * per))
        pq.write_table(pa.table({"id": ids, "sq": [i * i for i in ids]}), str(tmp_path / f"p-{k}.parquet"))
    return str(tmp_path)


def test_path_source_shares_ids_and_replay(spark, tmp_path):
    from bittern.spark import SparkSpout

    class Rows(SparkSpout):
        format = "parquet"
        fields = ["sq", "id"]

    path = _parquet(tmp_path)
    seen = []
    for i in range(2):
        d = Driven(Rows, {"spout.spark.path": path}, index=i, par=2)
        d.run(until=10)
        # ids are (file index in the task's share, row index in that file)
        assert d.ids[:3] == [(0, 0), (0, 1), (0, 2)]
        first = d.ids[0]
        d.spout.fail(first)  # replayed first, with the same values
        n = len(d.out)
        d.spout.next_tuple()
        assert d.ids[n] == first and d.out[n] == d.out[0]
        d.run(ack=True)
        d.stop()
        seen.append([tuple(v) for v in d.out if v])
    # task 0 reads files 0 and 2, task 1 file 1; each row once apart from the replay
    ids0 = sorted({v[1] for v in seen[0]})
    ids1 = sorted({v[1] for v in seen[1]})
    assert ids0 == list(range(0, 100)) + list(range(200, 300)) and ids1 == list(range(100, 200))
    assert all(sq == i * i for sq, i in seen[0] + seen[1])


def test_sql_source_split_by_hash_is_disjoint_and_repeatable(spark):
    from bittern.spark import SparkSpout

    class Query(SparkSpout):
        sql = "SELECT id, id % 7 AS m FROM range(0, 500) ORDER BY id"
        fields = ["id", "m"]

    runs = []
    for _ in range(2):
        shares = []
        for i in range(3):
            d = Driven(Query, index=i, par=3)
            d.run(ack=True)
            d.stop()
            shares.append([v[0] for v in d.out])
        runs.append(shares)
    assert runs[0] == runs[1], "each task emits the same rows in the same order on every run"
    flat = sorted(x for share in runs[0] for x in share)
    assert flat == list(range(500)) and all(runs[0])


def test_callable_source_and_exactly_once_rewind(spark):
    from bittern.api.state import State
    from bittern.spark import SparkSpout

    def frame(s):
        return s.range(0, 50).selectExpr("id", "CAST(id AS STRING) AS s")

    class Frame(SparkSpout):
        source = staticmethod(frame)
        fields = ["s"]

    eo = {"topology.reliability.mode": "EFFECTIVELY_ONCE"}
    d = Driven(Frame, eo, state=State())
    d.run(until=20)
    state = State()
    d.spout.init_state(state)  # a rollback to "nothing saved": from the start again
    d.out.clear()
    d.run(until=5)
    d.spout.pre_save(1)
    saved = state.get("offset")
    assert saved == {"index": 0, "row": len(d.out), "path": None}
    d.stop()
    again = Driven(Frame, eo, state=state)  # a restarted task restores the offset
    again.run()
    again.stop()
    assert d.out + again.out == [[str(i)] for i in range(50)]
