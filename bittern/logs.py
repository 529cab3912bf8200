"""Logging setup for Bittern's processes and where their log files live."""
from __future__ import annotations

import logging
import os
import sys


def setup(tag, level=logging.INFO):
    """Log to stderr (the supervisor points it at the process's log file)."""
    fmt = f"%(asctime)s %(levelname)s [{tag}] %(name)s: %(message)s"
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter(fmt))
    root.addHandler(h)
    root.setLevel(level)


def log_dir(home, topology):
    return os.path.join(home, "logs", topology)


def instance_log(home, topology, component, task):
    return os.path.join(log_dir(home, topology), f"{component}-{task}.log")
