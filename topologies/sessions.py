"""User sessions from click events: session windows on event time.

    bittern run topologies/sessions.py --until-done
    python topologies/sessions.py [OUTPUT_DIR]      # compare with sessions computed directly

    clicks (Spout, EventTime("ts", lag=5), par 2) -fields(user)-> sessions (WindowedBolt,
        Window.session(30), par 2) -global-> report (writes one line per session)

Each click is ``[user, page, ts]``. A user's session is the clicks that follow each
other by at most 30 s of event time; it ends (its window fires) once the watermark is
30 s past the user's last click. Clicks arrive up to 5 s out of order (the spout's
lag), so a click can join a session late, or bridge two sessions into one (session
windows merge). The clicks are generated deterministically (``sessions.users`` users,
``sessions.clicks`` clicks each) so the sessions can be computed directly.
"""
import json
import os
import random
import sys
import tempfile

from bittern import Bolt, EventTime, Grouping, Spout, Topology, Window, WindowedBolt

OUT = os.path.join(tempfile.gettempdir(), "bittern-sessions")
T0 = 1_700_000_000.0
GAP = 30.0


def clicks(users=50, per_user=40, seed=7):
    """Every click as (user, page, ts), in the order a source would see them: by time,
    with up to 5 s of disorder."""
    rng = random.Random(seed)
    out = []
    for u in range(users):
        t = T0 + rng.uniform(0, 60)
        for _ in range(per_user):
            # mostly short pauses, sometimes a long one (a new session)
            t += rng.uniform(1, 20) if rng.random() < 0.85 else rng.uniform(40, 300)
            out.append((f"user{u}", f"/page/{rng.randrange(20)}", round(t, 3)))
    out.sort(key=lambda c: c[2] + rng.uniform(0, 5))  # arrival order: up to 5 s out of order
    return out


class Clicks(Spout):
    outputs = ["user", "page", "ts"]
    event_time = EventTime("ts", lag=5.0)

    def initialize(self, config, context):
        every = clicks(int(config.get("sessions.users", 50)), int(config.get("sessions.clicks", 40)))
        par = len(context.get_component_tasks(context.component))
        self.mine = every[context.task_index::par]
        self.i = 0

    def next_tuple(self):
        if self.i >= len(self.mine):
            self.done()
            return
        self.emit(list(self.mine[self.i]), tup_id=self.i)
        self.i += 1


class Sessions(WindowedBolt):
    outputs = ["user", "start", "end", "clicks", "pages"]
    window = Window.session(GAP)
    timestamp_field = "ts"

    def process_window(self, window):
        pages = sorted({t["page"] for t in window.tuples})
        self.emit([window.key, window.start, window.end, len(window.tuples), pages])


class Report(Bolt):
    def initialize(self, config, context):
        self.out = config.get("sessions.output.dir") or OUT
        self.rows = []

    def process(self, tup):
        self.rows.append(tup.values)

    def close(self):
        os.makedirs(self.out, exist_ok=True)
        with open(os.path.join(self.out, "sessions.json"), "w") as f:
            json.dump(sorted(self.rows), f)
        print(json.dumps({"sessions": len(self.rows), "users": len({r[0] for r in self.rows})}))


class UserSessions(Topology):
    config = {"topology.stmgrs": 2}
    clicks = Clicks.spec(par=2)
    sessions = Sessions.spec(par=2, inputs={clicks: Grouping.fields("user")})
    report = Report.spec(inputs={sessions: Grouping.GLOBAL})


def expected(users=50, per_user=40):
    """[user, start, end, clicks] of every session, computed directly."""
    by_user = {}
    for user, _, ts in clicks(users, per_user):
        by_user.setdefault(user, []).append(ts)
    out = []
    for user, times in by_user.items():
        times.sort()
        start = last = times[0]
        n = 1
        for ts in times[1:]:
            if ts > last + GAP:
                out.append([user, start, last + GAP, n])
                start, n = ts, 0
            last = ts
            n += 1
        out.append([user, start, last + GAP, n])
    return sorted(out)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    with open(os.path.join(out, "sessions.json")) as f:
        got = sorted([u, s, e, n] for u, s, e, n, _ in json.load(f))
    want = expected()
    print(f"sessions: {len(got)} (expected {len(want)})")
    print("exact" if got == want else f"NOT exact: {len([r for r in want if r not in got])} sessions differ")
    sys.exit(0 if got == want else 1)
