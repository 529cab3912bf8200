#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest.
#
# The suite runs in $BITTERN_TEST_WORKERS pytest-xdist workers (default 2), a test file
# per worker at a time (--dist loadfile: module fixtures such as a nimbus or a Spark
# cluster are set up once): most end-to-end tests wait on processes, sessions and
# timeouts rather than compute, so two files at once take about half the time on two
# cores. Each worker has its own ZooKeeper server and every test its own BITTERN_HOME.
# `scripts/test.sh -n 0` runs everything in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -n "${BITTERN_TEST_WORKERS:-2}" --dist loadfile "$@"
