#!/usr/bin/env bash
# Set up Bittern on a fresh machine: a virtualenv in .venv with Bittern installed
# (editable) and what its tests need. Safe to run again; it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Bittern needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    "$PY" -m venv .venv
fi
# Reinstall only when setup.py changed since the last successful install.
stamp=.venv/.bittern-installed
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
    echo "setup: installing bittern[dev] into .venv" >&2
    .venv/bin/pip install --disable-pip-version-check -q -e ".[dev]"
    touch "$stamp"
fi
