"""Whether a running topology is healthy: the rule, and how clients show its verdict.

The topology master feeds :class:`HealthRule` what it observes (which containers and
tasks are registered, each checkpoint that completes or fails) and publishes the
verdict in its status document (``status/<name>``, key ``health``) and in its metrics
document. Pure: no I/O, no clock of its own (every call takes ``now``, in the
caller's monotonic seconds).

A topology is DEGRADED, with a reason and since when, while

* under EFFECTIVELY_ONCE, ``fail_streak`` checkpoints in a row failed (timed out, or
  every task saved one but it could not be recorded as complete), or none completed
  for ``stall_secs`` since checkpointing began or the last one completed;
* a container (its stream manager) or a task has not registered with the topology
  master for ``register_secs`` (at start-up, or after a container was lost).

It is HEALTHY again once every cause cleared (a checkpoint completed; everything
registered). Clients show DEGRADED in place of RUNNING/PAUSED/STARTING
(:func:`shown_state`); the topology master's own phase is not changed, so what waits
for RUNNING (submit, rebalance) is not affected.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

HEALTHY, DEGRADED = "HEALTHY", "DEGRADED"
FAIL_STREAK = 3  # checkpoints failed in a row before the topology is DEGRADED
STALL_INTERVALS = 10  # ... or none complete for this many checkpoint intervals
SYSTEM_COMPONENT = "__tmaster"  # the component of the topology master's own error records
SHOWN_OVER = ("RUNNING", "PAUSED", "STARTING")  # the states DEGRADED is shown in place of


@dataclass(frozen=True)
class Verdict:
    state: str
    reason: str | None = None
    since: float | None = None  # in the caller's clock (monotonic seconds)


def stall_bound(interval, timeout, intervals=STALL_INTERVALS):
    """Seconds without a complete checkpoint that make a topology DEGRADED: ``intervals``
    intervals, and never less than a timed-out checkpoint plus two intervals."""
    return max(intervals * float(interval), float(timeout) + 2 * float(interval))


class HealthRule:
    def __init__(self, containers, tasks, now, register_secs, checkpoints=False, interval=None,
                 timeout=None, fail_streak=FAIL_STREAK, stall_secs=None):
        """``containers``/``tasks``: every container and task id of the plan; ``now``:
        when the topology master started (everything is missing since then);
        ``register_secs``: how long a container or task may take to register;
        ``checkpoints``: EFFECTIVELY_ONCE (then ``interval``/``timeout`` are the
        checkpoint settings)."""
        if not register_secs > 0:
            raise ValueError(f"register_secs must be > 0, got {register_secs!r}")
        if checkpoints and not (interval and interval > 0 and timeout and timeout > 0):
            raise ValueError(f"checkpoint interval and timeout must be > 0, got {interval!r}, {timeout!r}")
        if fail_streak < 1:
            raise ValueError(f"fail_streak must be >= 1, got {fail_streak!r}")
        self.register_secs = float(register_secs)
        self.checkpoints = bool(checkpoints)
        self.fail_streak = int(fail_streak)
        self.stall_secs = (float(stall_secs) if stall_secs is not None
                           else stall_bound(interval, timeout) if checkpoints else None)
        self.missing = {("container", c): now for c in containers}
        self.missing.update({("task", t): now for t in tasks})
        self.streak = 0
        self.last_failure = None  # the reason of the newest failed checkpoint
        self.progress = None  # when checkpointing began or the last checkpoint completed
        self.since = None  # when the current degradation began

    # -- events ---------------------------------------------------------------------------
    def registered(self, containers, tasks, now):
        """Containers and tasks that registered (they are no longer missing)."""
        up = {("container", c) for c in containers} | {("task", t) for t in tasks}
        for key in up:
            self.missing.pop(key, None)

    def lost(self, kind, ident, now):
        """Container or task ``ident`` went away (e.g. its stream manager fell silent)."""
        self.missing.setdefault((kind, ident), now)

    def checkpoints_began(self, now):
        """The checkpoint coordinator started (the topology runs): the stall clock starts."""
        if self.progress is None:
            self.progress = now

    def checkpoint_completed(self, now):
        self.streak = 0
        self.last_failure = None
        self.progress = now

    def checkpoint_failed(self, reason, now):
        self.streak += 1
        self.last_failure = reason
        if self.progress is None:
            self.progress = now

    # -- the verdict ----------------------------------------------------------------------
    def problems(self, now):
        out = []
        late = {}
        for (kind, ident), since in self.missing.items():
            if now - since >= self.register_secs:
                late.setdefault(kind, []).append(ident)
        for kind in ("container", "task"):
            if kind in late:
                ids = sorted(late[kind])
                out.append(f"{kind}{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} not registered "
                           f"for over {self.register_secs:g}s")
        if self.checkpoints:
            if self.streak >= self.fail_streak:
                out.append(f"{self.streak} checkpoints in a row failed; last: {self.last_failure}")
            elif self.progress is not None and now - self.progress >= self.stall_secs:
                out.append(f"no checkpoint completed for over {self.stall_secs:g}s")
        return out

    def verdict(self, now):
        problems = self.problems(now)
        if not problems:
            self.since = None
            return Verdict(HEALTHY)
        if self.since is None:
            self.since = now
        return Verdict(DEGRADED, "; ".join(problems), self.since)


def health_doc(verdict, now, wall=None):
    """The verdict as published (``status/<name>`` and the metrics document):
    ``{"state", "reason", "since"}`` with ``since`` in epoch seconds."""
    if verdict.state != DEGRADED:
        return {"state": HEALTHY, "reason": None, "since": None}
    wall = time.time() if wall is None else wall
    return {"state": DEGRADED, "reason": verdict.reason, "since": wall - (now - verdict.since)}


# -- what clients show ---------------------------------------------------------------------
def degraded(health):
    return isinstance(health, dict) and health.get("state") == DEGRADED


def shown_state(state, health):
    """The state a user is shown: DEGRADED in place of RUNNING, PAUSED or STARTING while
    the topology master says so; any other state (FAILED, DEAD, ...) as it is."""
    return DEGRADED if state in SHOWN_OVER and degraded(health) else state


def annotate(row, status):
    """A ``topologies()`` row with the health of ``status`` (its status document):
    while it is DEGRADED, ``state`` DEGRADED, ``health``, ``reason`` and ``since`` (epoch
    seconds); a healthy row is left as it is. Changed in place and returned."""
    health = (status or {}).get("health")
    if degraded(health) and row.get("state") in SHOWN_OVER:
        row["health"] = health
        row["state"] = DEGRADED
        row["reason"] = health.get("reason")
        row["since"] = health.get("since")
    return row


def annotate_rows(rows, state):
    """:func:`annotate` every row from the status documents of ``state`` (a state manager)."""
    for row in rows:
        if row.get("state") in SHOWN_OVER:
            try:
                status = state.status(row["name"])
            except Exception:  # noqa: BLE001 - a status caught mid-write: the row as it is
                continue
            annotate(row, status)
    return rows


def since_text(since, now=None):
    """``since HH:MM:SS (Ns ago)`` for an epoch time."""
    if not since:
        return ""
    now = time.time() if now is None else now
    return f"since {time.strftime('%H:%M:%S', time.localtime(since))} ({max(0, int(now - since))}s ago)"


def describe(row_or_doc, now=None):
    """One line for a degraded topology: ``DEGRADED since ...: reason``; '' otherwise."""
    health = row_or_doc.get("health")
    if not degraded(health):
        return ""
    return f"DEGRADED {since_text(health.get('since'), now)}: {health.get('reason')}"


def merge_error(errors, rec, cap=None):
    """Add error record ``rec`` (``component``, ``where``, ``error``, ``time``, ...) to
    the list ``errors`` (newest last), merged into the newest record of the same
    component and ``where`` when that one is still ``open``: its ``count`` grows, its
    text and time become the newest, ``first_time`` stays. Returns ``(record, new)``.
    ``close_errors`` ends a run of merges (the cause cleared)."""
    for old in reversed(errors):
        if old.get("component") == rec.get("component") and old.get("where") == rec.get("where"):
            if old.get("open"):
                old.update({k: v for k, v in rec.items() if k not in ("first_time", "count")})
                old["count"] = old.get("count", 1) + 1
                errors.remove(old)
                errors.append(old)
                return old, False
            break
    rec = dict(rec, count=1, first_time=rec.get("time"), open=True)
    errors.append(rec)
    mine = [e for e in errors if e.get("component") == rec.get("component")]
    for old in mine[:max(0, len(mine) - cap)] if cap else ():
        errors.remove(old)
    return rec, True


def close_errors(errors, component, where=None):
    """The cause of ``component``'s open records (of ``where``, or all) cleared."""
    for rec in errors:
        if rec.get("component") == component and (where is None or rec.get("where") == where):
            rec["open"] = False
