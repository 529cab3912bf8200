"""The Spark → msgpack type mapping (bittern.spark.typemap), with one real local
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
