"""The health manager's decision log for people: one line per decision, as
``bittern healthmgr NAME`` and ``bittern top`` print it. It lives on the ground floor
(the CLI and the live view import no process package); the health manager itself is
in streammgr/health/."""
from __future__ import annotations

import time


def describe(entry):
    """One line of a decision-log entry (a dict of :meth:`HealthManager.decisions`), as
    ``bittern healthmgr NAME`` and ``bittern top`` print it."""
    d, a = entry.get("diagnosis") or {}, entry.get("action") or {}
    where = d.get("component") or "?"
    if d.get("task") is not None:
        where += f" task {d['task']}"
    if a.get("kind") == "scale":
        what = f"scale {a.get('component')} {a.get('parallelism_from')} -> {a.get('parallelism_to')}"
    elif a.get("kind") == "restart":
        what = f"restart task {a.get('task')}"
    else:
        what = a.get("kind") or "-"
    symptoms = ",".join(sorted({s.get("kind", "?") for s in entry.get("symptoms") or ()})) or "-"
    if entry.get("at"):  # the wall-clock time (the topology master adds it)
        when = time.strftime("%H:%M:%S ", time.localtime(entry["at"]))
    else:
        when = "" if entry.get("time") is None else f"{entry['time']:8.0f}s "
    if entry.get("id") is not None:
        when += f"#{entry['id']} "
    return (f"{when}{d.get('kind', '?')} {where}: {what} [{entry.get('outcome')}] "
            f"symptoms {symptoms}; {a.get('reason', '')}").rstrip("; ")
