"""Checkpoint cost with a large keyed state: full snapshot vs incremental delta.

    .venv/bin/python scripts/ckpt_measure.py [--keys 1000000] [--rounds 5] [--dir D] [--json]

The command line of scripts/benchkit/ckpt.py (its docstring says what is measured and
how): for 0.1 %, 1 % and 10 % of ``--keys`` keys changed per interval, ``--rounds``
checkpoints through the instance's own machinery (instance/ckptwriter.py
``Checkpointing``), printing per row the full snapshot's bytes, the delta's bytes and
share, the loop's pause (median, max) and the writer's write time; then three
compactions with the longest gap a busy loop on the main thread saw meanwhile.

``--json``: the readable lines go to stderr and one line ``CKPT {json}`` with every
figure to stdout (what scripts/bench.py's ``ckpt-1m`` rows read). Exits 1 if the
compacted base does not restore to exactly the live state.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from benchkit.ckpt import measure


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="checkpoint directory (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true", help="figures as one CKPT {json} line on stdout")
    args = ap.parse_args(argv)
    if args.keys < 100 or args.rounds < 1:
        ap.error(f"--keys must be >= 100 and --rounds >= 1, got --keys {args.keys} --rounds {args.rounds}")
    root = args.dir or tempfile.mkdtemp(prefix="ckpt-measure-")
    if args.dir:
        os.makedirs(root, exist_ok=True)
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    try:
        result = measure(root, keys=args.keys, rounds=args.rounds, say=say)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print("CKPT " + json.dumps(result), flush=True)
    return 0 if result["restored_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
