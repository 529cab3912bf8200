"""What can be checked about a Spark source without starting a JVM (the CLI does
this before it starts anything, see :meth:`SparkSpout.preflight`): Java, the
files, their format and their columns.

Columns are read the cheap way: Parquet and ORC footers with pyarrow (in a child
process when the caller has not loaded pyarrow: ``bittern run`` stays up for the
whole run and should not hold its ~40 MB for one look at the footers), a CSV's
header line (``header`` option; without it Spark names the columns ``_c0``,
``_c1``, ...), the keys of a JSON-lines file's first :data:`JSON_SAMPLE_BYTES`
bytes. A JSON key that first appears further down is not seen here; name it in
``fields`` only if it is in that sample, or give the spout an SQL/callable source.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys

from ..errors import BitternError

__all__ = ["SparkSourceError", "FORMATS", "resolve_paths", "check_java", "file_columns", "files_columns", "shard",
           "run_apart"]

#: The formats a path source may name (Spark's built-in file sources).
FORMATS = ("parquet", "orc", "csv", "json", "text")
JSON_SAMPLE_BYTES = 1 << 20
MIN_JAVA = 17


class SparkSourceError(BitternError):
    """A Spark source that cannot be read as configured (or no usable Java)."""


def resolve_paths(spec):
    """The sorted, de-duplicated list of files ``spec`` names: a glob, a directory
    (its files, hidden ones and ``_SUCCESS``-style markers left out), several of
    these separated by commas, or a list. Any entry that matches nothing is an error."""
    if spec is None or spec == "" or spec == []:
        raise SparkSourceError("SparkSpout needs a source: a path (spout.spark.path or the class's "
                               "`path`), an SQL query (`sql`) or a callable (`source`)")
    if isinstance(spec, (str, os.PathLike)):
        entries = [e.strip() for e in os.fspath(spec).split(",")]
    elif isinstance(spec, (list, tuple)):
        entries = [os.fspath(e).strip() for e in spec]
    else:
        raise SparkSourceError(f"spark source path must be a string or a list of strings, got {spec!r}")
    out = set()
    for entry in filter(None, entries):
        entry = os.path.expanduser(entry)
        if os.path.isdir(entry):
            found = [os.path.join(d, f) for d, _, fs in os.walk(entry) for f in fs
                     if not f.startswith((".", "_"))]
        elif glob.has_magic(entry):
            found = [p for p in glob.glob(entry) if os.path.isfile(p)]
        elif os.path.isfile(entry):
            found = [entry]
        else:
            raise SparkSourceError(f"spark source: path {entry!r} does not exist")
        if not found:
            raise SparkSourceError(f"spark source: {entry!r} matches no file")
        out.update(os.path.abspath(p) for p in found)
    return sorted(out)


def shard(files, index, parallelism):
    """Task ``index`` of ``parallelism`` reads ``files[index::parallelism]``."""
    return list(files[index::parallelism])


def java_command():
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        return java if os.access(java, os.X_OK) else None
    return shutil.which("java")


def check_java():
    """The major version of the Java that Spark will start; SparkSourceError when
    there is none (or it is older than 17)."""
    java = java_command()
    if java is None:
        where = "JAVA_HOME/bin/java" if os.environ.get("JAVA_HOME") else "`java` on PATH"
        raise SparkSourceError(f"SparkSpout needs Java {MIN_JAVA}+ and found no {where}; install a JDK/JRE "
                               f"{MIN_JAVA} (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    try:
        r = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SparkSourceError(f"SparkSpout: {java} -version failed: {e}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', r.stderr + r.stdout)
    if r.returncode != 0 or not m:
        raise SparkSourceError(f"SparkSpout: {java} -version failed (exit {r.returncode}): "
                               f"{(r.stderr or r.stdout).strip()[:300]}")
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    if major < MIN_JAVA:
        raise SparkSourceError(f"SparkSpout needs Java {MIN_JAVA}+, {java} is Java {major}")
    return major


def _true(v):
    return str(v).lower() in ("true", "1", "yes")


def file_columns(path, fmt, options=None):
    """The column names Spark will see in ``path`` read as ``fmt`` (see the module
    docstring); SparkSourceError when the file is not of that format."""
    options = {str(k).lower(): v for k, v in (options or {}).items()}
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq
            return list(pq.read_schema(path).names)
        if fmt == "orc":
            import pyarrow.orc as orc
            return list(orc.ORCFile(path).schema.names)
        if fmt == "text":
            return ["value"]
        if fmt == "csv":
            sep = str(options.get("sep", options.get("delimiter", ",")))
            with open(path, newline="", encoding=str(options.get("encoding", "utf-8"))) as f:
                first = next(csv.reader(f, delimiter=sep[:1] or ","), [])
            if _true(options.get("header", False)):
                return first
            return [f"_c{i}" for i in range(len(first))]
        if fmt == "json":
            if _true(options.get("multiline", False)):
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                docs = doc if isinstance(doc, list) else [doc]
            else:
                with open(path, encoding="utf-8") as f:
                    text = f.read(JSON_SAMPLE_BYTES)
                lines = text.splitlines()
                if len(text) == JSON_SAMPLE_BYTES and lines:
                    lines = lines[:-1]  # the last line may be cut
                docs = [json.loads(ln) for ln in lines if ln.strip()]
            cols = {}
            for d in docs:
                if not isinstance(d, dict):
                    raise ValueError(f"a JSON record is a {type(d).__name__}, not an object")
                cols.update(dict.fromkeys(d))
            return list(cols)
    except SparkSourceError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the reader says is the reason
        raise SparkSourceError(f"spark source: {path} cannot be read as {fmt}: {type(e).__name__}: {e}") from None
    raise SparkSourceError(f"spark source: unknown format {fmt!r} (path sources read one of "
                           f"{', '.join(FORMATS)}; use an SQL or callable source for others)")


APART_FAILED = 3  # the exit status of a child of run_apart that failed with a SparkSourceError


def run_apart(code, payload, what, timeout=300.0):
    """Run ``code`` (Python, reading one JSON line ``payload`` on stdin) in a child
    interpreter that imports this package, so that what it loads is not kept by the
    caller. The child prints its answer as JSON on stdout; a SparkSourceError there is
    one line on stderr and exit status APART_FAILED, raised here as it was. Payloads go
    through stdin (they may hold a secret), never argv."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p]))
    try:
        r = subprocess.run([sys.executable, "-c", code], input=json.dumps(payload) + "\n", capture_output=True,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise SparkSourceError(f"{what}: no answer within {timeout:.0f}s") from None
    lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
    if r.returncode == APART_FAILED and lines:
        raise SparkSourceError(lines[-1])
    if r.returncode != 0:
        raise SparkSourceError(f"{what} failed: {lines[-1][:300] if lines else f'exit status {r.returncode}'}")
    return json.loads(r.stdout) if r.stdout.strip() else None


_COLUMNS = """
import json, sys
from bittern.spark.source import SparkSourceError, file_columns, APART_FAILED
a = json.loads(sys.stdin.readline())
try:
    print(json.dumps([file_columns(f, a["fmt"], a["options"]) for f in a["files"]]))
except SparkSourceError as e:
    print(str(e), file=sys.stderr)
    sys.exit(APART_FAILED)
"""


def files_columns(files, fmt, options=None):
    """:func:`file_columns` of each of ``files``; Parquet and ORC footers are read in
    one child process unless pyarrow is already loaded here."""
    if fmt in ("parquet", "orc") and "pyarrow" not in sys.modules and files:
        return run_apart(_COLUMNS, {"files": list(files), "fmt": fmt, "options": options or {}},
                         f"reading the {fmt} footers of {files[0]}{' and others' if len(files) > 1 else ''}")
    return [file_columns(f, fmt, options) for f in files]
