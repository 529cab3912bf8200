"""CPU, memory and threads of the current process, as metrics (psutil)."""
from __future__ import annotations

import psutil


class ProcStats:
    def __init__(self):
        self.proc = psutil.Process()
        self.proc.cpu_percent(None)  # the first reading is always 0: prime it

    def read(self):
        p = self.proc
        with p.oneshot():
            return {"__cpu-percent": p.cpu_percent(None), "__rss-bytes": p.memory_info().rss,
                    "__threads": p.num_threads()}
