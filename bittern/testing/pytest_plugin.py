"""A pytest plugin for topologies in real processes: ``pytest -p
bittern.testing.pytest_plugin`` (or installed: the ``pytest11`` entry point), or
``from bittern.testing.pytest_plugin import bittern_run`` in a test module.

The ``bittern_run`` fixture is a :class:`BitternRunner` on a private ``BITTERN_HOME``
(under the test's ``tmp_path``)::

    def test_word_count(bittern_run):
        r = bittern_run.run("topologies/word_count.py", duration=5,
                            config={"wordcount.sentences": 1000})
        assert r.components["count"]["executed"] == r.components["split"]["emitted"]

When the test ends, any process still running under that home (supervisor, stream
managers, instances, topology master) is killed and the test fails, naming them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psutil
import pytest


@dataclass
class RunResult:
    """A ``bittern run --json``: ``summary`` (the JSON document), ``components`` (its rows
    by component name), ``printed`` (JSON objects the components printed), ``stdout``,
    ``stderr``, ``returncode``."""
    summary: dict
    components: dict
    printed: list
    stdout: str = field(repr=False)
    stderr: str = field(repr=False)
    returncode: int = 0


class BitternRunner:
    """Runs the ``bittern`` command line against one ``BITTERN_HOME``."""

    def __init__(self, home, python=sys.executable, cwd=None):
        self.home, self.python, self.cwd = str(home), python, cwd
        os.makedirs(self.home, exist_ok=True)
        self.env = dict(os.environ, BITTERN_HOME=self.home, PYTHONUNBUFFERED="1")

    def cli(self, *args, timeout=120, check=True):
        """``bittern ARGS...``; raises (with its output) on a non-zero exit when ``check``."""
        r = subprocess.run([self.python, "-m", "bittern", *map(str, args)], env=self.env, capture_output=True,
                           text=True, timeout=timeout, cwd=self.cwd)
        if check and r.returncode != 0:
            raise AssertionError(f"bittern {' '.join(map(str, args))} exited {r.returncode}\n"
                                 f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
        return r

    def run(self, path, *, until_done=False, duration=None, config=None, name=None, timeout=300, check=True):
        """``bittern run PATH --json`` (``--until-done``, ``--duration``, ``--config k=v``
        for each item of ``config``, ``--name``): the run in real processes, to its end."""
        args = ["run", os.path.abspath(path), "--json"]
        if until_done:
            args.append("--until-done")
        if duration is not None:
            args += ["--duration", duration]
        if name:
            args += ["--name", name]
        for k, v in (config or {}).items():
            args += ["--config", f"{k}={json.dumps(v) if not isinstance(v, str) else v}"]
        r = self.cli(*args, timeout=timeout, check=check)
        lines = r.stdout.strip().splitlines()
        summary = {}
        if lines:
            try:
                summary = json.loads(lines[-1])
            except ValueError:
                summary = {}
        printed = []
        for ln in lines[:-1]:
            if "{" in ln:
                try:
                    printed.append(json.loads(ln[ln.index("{"):]))
                except ValueError:
                    pass
        comps = {c["component"]: c for c in summary.get("components", [])}
        return RunResult(summary, comps, printed, r.stdout, r.stderr, r.returncode)

    def processes(self):
        """Live processes whose command line mentions this home (every process of a
        local topology does)."""
        out = []
        for p in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                    continue
                if any(self.home in part for part in p.info["cmdline"] or []):
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return out

    def kill_leftovers(self, grace=2.0):
        """Wait up to ``grace`` seconds for this home's processes to end, kill the rest;
        returns descriptions of those that had to be killed."""
        deadline = time.monotonic() + grace
        left = self.processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.processes()
        described = []
        for p in left:
            try:
                described.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:160]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        return described


@pytest.fixture
def bittern_run(tmp_path):
    """A :class:`BitternRunner` on a private ``BITTERN_HOME``; the test fails if any
    process of it is left when the test ends (they are killed)."""
    runner = BitternRunner(tmp_path / "bittern-home")
    yield runner
    leaked = runner.kill_leftovers()
    if leaked:
        pytest.fail("processes left behind under BITTERN_HOME " + runner.home + ":\n" + "\n".join(leaked),
                    pytrace=False)
