"""The health manager's decision log for people: one line per decision, as
``bittern healthmgr NAME`` and ``bittern top`` print it, then one compact line per
component with the true-rate model's numbers when the decision has them. It lives on
the ground floor (the CLI and the live view import no process package); the health
manager itself is in streammgr/health/."""
from __future__ import annotations

import time


def _rate(v):
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "?"
    return f"{v:.0f}/s" if v >= 10 else f"{v:.2g}/s"


def _scales(a):
    targets = a.get("targets") or {}
    if isinstance(targets, dict) and targets:
        return ", ".join(f"{c} {ft[0]} -> {ft[1]}" for c, ft in targets.items()
                         if isinstance(ft, (list, tuple)) and len(ft) == 2)
    return f"{a.get('component')} {a.get('parallelism_from')} -> {a.get('parallelism_to')}"


def model_line(name, e):
    """One component's model numbers: demand, true rate per task, selectivity, required."""
    if not isinstance(e, dict):
        return f"    {name}: ?"
    if e.get("kind") == "spout":
        return f"    {name}: spout, demand {_rate(e.get('demand'))}" + ("" if e.get("exact", True) else " (at least)")
    sel = e.get("selectivity") or {}
    sels = ",".join(f"{v:g}" for v in sel.values() if isinstance(v, (int, float))) or "?"
    req = e.get("required")
    parts = [f"demand {_rate(e.get('demand'))}" + ("" if e.get("exact", True) else " (at least)"),
             f"{_rate(e.get('true_rate_per_task'))} per busy task", f"selectivity {sels}",
             f"needs {req if req is not None else '?'} (has {e.get('current', '?')})"]
    line = f"    {name}: " + ", ".join(parts)
    if req is None and e.get("why"):
        line += f": {e['why']}"
    return line


def describe(entry):
    """A decision-log entry (a dict of :meth:`HealthManager.decisions`) as ``bittern
    healthmgr NAME`` and ``bittern top`` print it: one line, then the model's numbers
    for each component it concerns (one line each)."""
    d, a = entry.get("diagnosis") or {}, entry.get("action") or {}
    where = d.get("component") or "?"
    if d.get("task") is not None:
        where += f" task {d['task']}"
    if a.get("kind") == "scale":
        what = f"scale {_scales(a)}"
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
    line = (f"{when}{d.get('kind', '?')} {where}: {what} [{entry.get('outcome')}] "
            f"symptoms {symptoms}; {a.get('reason', '')}").rstrip("; ")
    model = entry.get("model")
    if isinstance(model, dict) and model:
        line += "\n" + "\n".join(model_line(n, e) for n, e in model.items())
    return line
