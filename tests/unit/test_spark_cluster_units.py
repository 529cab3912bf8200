"""The pure parts of SparkSpout's cluster modes (bittern.spark.cluster): parsing
``spout.spark.master``, the Connect version rule, the driver helper's stop decision,
the client URL, the helper directory's bookkeeping, and the preflight's one-liners for
masters nothing answers at (real sockets, no JVM)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from bittern.spark.cluster import (HelperDir, check_versions, connect_url, helper_should_stop, parse_master,
                                   preflight_master)
from bittern.spark.source import SparkSourceError


def test_parse_master_modes():
    assert parse_master(None) == ("local", "local[1]")
    assert parse_master("local") == ("local", "local")
    assert parse_master("local[4]") == ("local", "local[4]")
    assert parse_master("local[*]") == ("local", "local[*]")
    assert parse_master("spark://10.0.0.5:7077") == ("standalone", "10.0.0.5", 7077)
    assert parse_master("sc://localhost:15002") == ("connect", "localhost", 15002, {})
    assert parse_master("sc://h:1/;token=abc;use_ssl=true") == ("connect", "h", 1, {"token": "abc", "use_ssl": "true"})


@pytest.mark.parametrize("bad, words", [
    ("yarn", "not local[k], spark://HOST:PORT"),
    ("local[0]", "at least one thread"),
    ("local[x]", "not local[k]"),
    ("spark://host", "expected spark://HOST:PORT"),
    ("sc://:15002", "expected sc://HOST:PORT"),
    ("spark://h:99999", "spout.spark.master 'spark://h:99999'"),
])
def test_parse_master_refuses_with_one_line_naming_it(bad, words):
    with pytest.raises(SparkSourceError) as e:
        parse_master(bad)
    msg = str(e.value)
    assert words in msg and bad in msg and "\n" not in msg, msg


def test_connect_version_rule():
    assert check_versions("4.3.0", "4.3.0") is None
    assert check_versions("4.4.1", "4.3.0") is None  # a newer server of the same major
    assert "Spark 3.5.1" in check_versions("3.5.1", "4.3.0")
    assert "needs Spark 4.3+" in check_versions("4.1.0", "4.3.0")  # the client may send newer plans
    assert "no Spark version" in check_versions("", "4.3.0")


def test_helper_stop_decision():
    assert helper_should_stop([11], True, None, 100.0, 10) == ("run", None)
    assert helper_should_stop([], True, None, 100.0, 10) == ("run", 100.0)  # the last one just went
    assert helper_should_stop([], True, 100.0, 105.0, 10) == ("run", 100.0)
    assert helper_should_stop([], True, 100.0, 110.0, 10) == ("stop", "no spout task for 10s")
    assert helper_should_stop([12], True, 100.0, 111.0, 10) == ("run", None)  # a restarted task came back
    assert helper_should_stop([12], False, None, 1.0, 10) == ("stop", "its Spark Connect JVM exited")


def test_connect_url_uses_local_credentials_for_a_loopback_token():
    assert connect_url("127.0.0.1", 7, {}, None) == "sc://127.0.0.1:7"
    assert connect_url("127.0.0.1", 7, {}, "t") == "sc://localhost:7/;token=t"
    assert connect_url("spark.example", 7, {"use_ssl": "true"}, "t") == "sc://spark.example:7/;use_ssl=true;token=t"
    assert connect_url("h", 7, {"token": "own"}, "t") == "sc://h:7/;token=own"


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("scheme", ["spark", "sc"])
def test_preflight_names_a_master_nothing_answers_at(scheme):
    port = _closed_port()
    with pytest.raises(SparkSourceError) as e:
        preflight_master({"spout.spark.master": f"{scheme}://127.0.0.1:{port}"})
    msg = str(e.value)
    assert msg == (f"spout.spark.master {scheme}://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} "
                   "(Connection refused)"), msg


def test_preflight_names_a_missing_secret_file(tmp_path):
    with pytest.raises(SparkSourceError) as e:
        preflight_master({"spout.spark.master": "spark://127.0.0.1:1", "spout.spark.secret.file": str(tmp_path / "s")})
    assert str(e.value).startswith(f"spout.spark.secret.file {tmp_path / 's'}: No such file"), e.value
    assert preflight_master({"spout.spark.master": "local[2]"}) == ("local", "local[2]")


def test_helper_dir_clients_and_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    hd = HelperDir("topo", "spark://h:1", home="/x")
    assert hd.path.startswith(str(tmp_path)) and oct(os.stat(hd.path).st_mode & 0o777) == "0o700"
    assert HelperDir("topo", "spark://h:1", home="/x").path == hd.path
    assert HelperDir("other", "spark://h:1", home="/x").path != hd.path
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hd.register(os.getpid())
        hd.register(child.pid)
        assert sorted(hd.live_clients()) == sorted([os.getpid(), child.pid])
        child.kill()
        child.wait()
        assert hd.live_clients() == [os.getpid()]
        assert sorted(os.listdir(hd.file("clients"))) == [str(os.getpid())]  # the dead one's file removed
        hd.unregister(os.getpid())
        assert hd.live_clients() == []
        assert hd.helper_pid() is None
        with hd.locked():
            hd.write_json("server.json", {"port": 1})
        assert oct(os.stat(hd.file("server.json")).st_mode & 0o777) == "0o600"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_preflight_reads_parquet_footers_in_a_child_and_keeps_no_pyarrow(tmp_path):
    """``bittern run`` stays up for the whole run: its look at the footers must not
    leave pyarrow (~40 MB) loaded in it. Good files give their columns, a bad one a
    one-line error naming it, and neither loads pyarrow in the caller."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    good = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [1], "word": ["x"]}), good)
    bad = tmp_path / "b.parquet"
    bad.write_bytes(b"not parquet at all")
    code = ("import json, sys\n"
            "from bittern.spark.source import files_columns, SparkSourceError\n"
            f"out = {{'cols': files_columns([{str(good)!r}], 'parquet')}}\n"
            "try:\n"
            f"    files_columns([{str(good)!r}, {str(bad)!r}], 'parquet')\n"
            "except SparkSourceError as e:\n"
            "    out['error'] = str(e)\n"
            "out['pyarrow'] = 'pyarrow' in sys.modules\n"
            "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert r.returncode == 0, r.stderr
    import json
    out = json.loads(r.stdout)
    assert out["cols"] == [["id", "word"]]
    assert str(bad) in out["error"] and "\n" not in out["error"], out
    assert out["pyarrow"] is False
