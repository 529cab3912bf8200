"""The peers' rows: plain Python, a raw pyzmq pipeline, Bytewax and Bytewax's windowed word
count, from ../shared/bench."""
from __future__ import annotations

import json
import os
import subprocess
import sys


from .common import PEER_VENVS, WORK
from .measure import Measured


# ---------------------------------------------------------------------------------------
# Peers
# ---------------------------------------------------------------------------------------

class Peers:
    def __init__(self, args):
        self.args = args
        self.dir = args.peers_dir
        self.py = {}  # venv name -> python, or None
        self.notes = []

    def available(self):
        for f in ("wc_common.py", "p1_plain.py", "p2_zmq.py", "p3_bytewax.py"):
            if not os.path.exists(os.path.join(self.dir, f)):
                self.notes.append(f"peers skipped: {os.path.join(self.dir, f)} not found (--peers-dir)")
                return False
        return True

    def venv(self, name):
        """The python of peer virtualenv ``name``, created on demand; None if it cannot be."""
        if name in self.py:
            return self.py[name]
        pkgs = PEER_VENVS[name]
        d = os.path.join(WORK, f"venv-{name}")
        py = os.path.join(d, "bin", "python")
        marker = os.path.join(d, ".bench-ok")
        want = " ".join(pkgs)
        try:
            with open(marker) as f:
                ok = f.read().strip() == want
        except OSError:
            ok = False
        if not ok:
            print(f"[bench] creating the peer virtualenv {d} ({want}) ...", file=sys.stderr, flush=True)
            try:
                if not os.path.exists(py):
                    subprocess.run([sys.executable, "-m", "venv", d], check=True, capture_output=True,
                                   text=True, timeout=300)
                r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pkgs],
                                   capture_output=True, text=True, timeout=900)
                if r.returncode != 0:
                    lines = (r.stderr or r.stdout).strip().splitlines()
                    raise RuntimeError(lines[-1] if lines else f"pip exited {r.returncode}")
                with open(marker, "w") as f:
                    f.write(want + "\n")
            except (OSError, subprocess.SubprocessError, RuntimeError) as e:
                msg = e.args[0] if isinstance(e, RuntimeError) else e
                if isinstance(e, subprocess.CalledProcessError):
                    msg = (e.stderr or "").strip()[-300:]
                self.notes.append(f"peer venv {name!r} ({want}) could not be installed: {msg}; "
                                  "its peers are skipped")
                self.py[name] = None
                return None
        self.py[name] = py
        return py

    def commands(self, row, quick, n_win=None):
        """[(label, cmd, env)] for a peer row, or [] (with a note) when it cannot run."""
        d = self.dir
        if row == "plain":
            py = self.venv("base")
            n = 200_000 if quick else 2_000_000
            return [("plain", [py, os.path.join(d, "p1_plain.py"), "-n", str(n)], {})] if py else []
        if row == "zmq":
            py = self.venv("base")
            n = 200_000 if quick else 1_000_000
            return [("zmq", [py, os.path.join(d, "p2_zmq.py"), "--transport", "ipc", "--ser", "msgpack",
                             "--batch", "100", "-n", str(n)], {})] if py else []
        if row == "bytewax":
            py = self.venv("bytewax")
            n = 100_000 if quick else 500_000
            flow = f"p3_bytewax:get_flow(n={n}, variant='stateful_map', batch=1000)"
            return [("bytewax", [py, "-m", "bytewax.run", flow], {"PYTHONPATH": d})] if py else []
        if row == "bytewax-window":  # the same n as the Bittern windowed row (-n)
            if not os.path.exists(os.path.join(d, "p3_bytewax_window.py")):
                self.notes.append(f"peer bytewax-window skipped: {d}/p3_bytewax_window.py not found")
                return []
            py = self.venv("bytewax")
            flow = f"p3_bytewax_window:get_flow(n={n_win or (20_000 if quick else 300_000)})"
            return [("bytewax-window", [py, "-m", "bytewax.run", flow], {"PYTHONPATH": d})] if py else []
        raise ValueError(row)

    def run(self, row, quick, n_win=None):
        recs = []
        for label, cmd, env in self.commands(row, quick, n_win):
            m = Measured(cmd, env, timeout=self.args.timeout, cwd=self.dir).wait()
            got = False
            for line in m.out.splitlines():
                first_variant = not got
                if not line.startswith("WCRESULT "):
                    continue
                got = True
                r = json.loads(line[9:])
                tf = r.get("t_first") or (min(m.firsts) if m.firsts else None)
                r.update(m.base_record())
                r["t_first"] = tf
                # a later variant of the same invocation started after the earlier ones ran
                r["startup_s"] = (tf - m.t0) if tf and first_variant else None
                r["proc_s"] = (r["t_end"] - tf) if tf and r.get("t_end") else None
                if r["proc_s"]:
                    r["sent_per_s"] = r["sentences"] / r["proc_s"]
                    r["words_per_s"] = r["words"] / r["proc_s"]
                r["row"] = f"{label}:{r.get('variant', '')}"
                r["ok"] = bool(r.get("ok")) and m.proc.returncode == 0
                if m.proc.returncode != 0:
                    r["stderr_tail"] = m.err[-1500:]
                recs.append(r)
            if not got:
                recs.append(dict(m.base_record(), row=f"{label}:?", ok=False, peer=label,
                                 stderr_tail=m.err[-2000:], stdout_tail=m.out[-1000:]))
        return recs


