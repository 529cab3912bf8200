#!/usr/bin/env bash
# Set up Bittern on a fresh machine: a virtualenv in .venv with Bittern installed
# (editable) and what its tests need. Safe to run again; it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages, installed with apt-get when we are root; otherwise say what is missing
# and what will not work without it (the tests that need it will fail).
apt_install() {  # apt_install WHY PACKAGE...
    local why=$1; shift
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing $* with apt-get ($why)" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        echo "setup: warning: missing $* ($why); install it with your package manager" >&2
    fi
}

# tmux: the live view (bittern top) is tested in a real terminal.
command -v tmux >/dev/null 2>&1 || apt_install "bittern top is tested under tmux" tmux

# ZooKeeper (Debian's package, run from a temp dir by scripts/zookeeper.sh): the
# cluster-mode state manager is tested against a real server. zookeeper.sh installs
# it when root; otherwise it names the missing package and we only warn.
if ! scripts/zookeeper.sh install; then
    [ "$(id -u)" != 0 ] || exit 1  # root and apt failed: a real error
    echo "setup: warning: ZooKeeper is missing; the cluster-mode tests will fail" >&2
fi

# Chromium (Debian's) and its driver: the web UI's browser tests (tests/test_webui.py, Playwright
# against /usr/bin/chromium; no browser is downloaded).
command -v chromium >/dev/null 2>&1 || apt_install "the web UI is tested in headless Chromium" chromium chromium-driver

# Java 17+ for PySpark (bittern[spark]: the SparkSpout and its tests start a local JVM).
java_major() {
    java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1
}
if [ -z "${JAVA_HOME:-}" ] && { ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ] 2>/dev/null; }; then
    apt_install "PySpark needs Java 17+" openjdk-17-jre-headless
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Bittern needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2
    exit 1
fi
# Debian's python3 makes virtualenvs only with python3-venv (ensurepip); the tests'
# throwaway venvs (streamparse, heronpy from PyPI) need it too.
if ! "$PY" -c 'import ensurepip' 2>/dev/null; then
    apt_install "virtualenvs need ensurepip" python3-venv
fi
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    "$PY" -m venv .venv
fi
# Reinstall only when setup.py changed since the last successful install.
stamp=.venv/.bittern-installed
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
    echo "setup: installing bittern[dev,spark,spark-connect] into .venv (pyspark is ~460 MB: the first time takes a minute)" >&2
    .venv/bin/pip install --disable-pip-version-check -q -e ".[dev,spark,spark-connect]"
    touch "$stamp"
fi
