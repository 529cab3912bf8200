"""Supervisors enforce per-instance memory limits: an instance over its limit is
killed and restarted (supervisor/procs.py), and the others are not touched."""
from __future__ import annotations

import os

from conftest import TOPOLOGIES, wait_for

HOG = os.path.join(TOPOLOGIES, "memory_hog.py")


def test_instance_over_its_memory_limit_is_killed_and_restarted(bittern, tmp_path):
    out = str(tmp_path / "out")
    bittern("submit", HOG, "--name", "hog", "--config", f"test.out={out}",
            "--config", "bittern.restart.backoff.initial.secs=0.2", check=True)
    try:
        spout_pid = bittern.processes("hog")["instance-2"]["pid"]
        wait_for(lambda: len([f for f in os.listdir(out) if f.startswith("hog-")]) >= 3 if os.path.isdir(out)
                 else False, timeout=60, what="the hog killed and restarted twice")
        log = open(os.path.join(bittern.home, "logs", "hog", "supervisor.log")).read()
        assert "instance-1" in log and "over its limit of 120 MB" in log
        procs = bittern.processes("hog")
        assert procs["instance-1"]["restarts"] >= 2
        assert procs["instance-2"]["pid"] == spout_pid and procs["instance-2"]["restarts"] == 0
    finally:
        bittern("kill", "hog", check=True)
