#!/usr/bin/env bash
# A private Spark for SparkSpout's cluster modes and their tests: a standalone master,
# one worker and a Spark Connect server, all from the jars pyspark ships (no Spark
# download), run as plain background processes on 127.0.0.1 with state in DIR.
#
#   scripts/spark.sh start DIR [MASTER_PORT [CONNECT_PORT]]   start what is not running
#   scripts/spark.sh stop DIR [master|worker|connect]         stop them (all by default)
#   scripts/spark.sh status DIR                               exit 0 if all three serve
#
# Ports default to 7077 (master) and 15002 (Connect). After a start, DIR/urls holds
#   SPARK_MASTER_URL=spark://127.0.0.1:PORT
#   SPARK_CONNECT_URL=sc://localhost:PORT
#   SPARK_SECRET_FILE=DIR/secret
# Security: everything binds 127.0.0.1 (web UIs included). Spark standalone has no
# authentication unless asked: this one runs with spark.authenticate and a random
# secret (DIR/secret, mode 0600) that every application must present (SparkSpout:
# spout.spark.secret.file); the Connect server takes the same secret as its bearer
# token (SPARK_CONNECT_AUTHENTICATE_TOKEN). Secrets go in 0600 files, never argv.
# Memory: 256 MB daemons, a worker offering 2 GB and 4 cores (two applications fit), 512 MB driver and executor for Connect.
set -euo pipefail

die() { echo "spark.sh: $*" >&2; exit 1; }

PY=${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
[ -x "$PY" ] || PY=python3
spark_home() {
    "$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null \
        || die "pyspark is not installed for $PY (pip install 'bittern[spark]')"
}

listening() {  # PORT: something accepts TCP connections on 127.0.0.1:PORT
    timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$0' "$1" 2>/dev/null
}

running_pid() {  # DIR NAME: the pid in DIR/NAME.pid if that process is still ours
    local pid
    pid=$(cat "$1/$2.pid" 2>/dev/null) || return 1
    # a recycled pid: check the command line names our properties file
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$1/$2.properties" || return 1
    echo "$pid"
}

write_props() {  # DIR NAME [extra lines...]: DIR/NAME.properties (0600: it holds the secret)
    local dir=$1 name=$2
    shift 2
    (umask 077
     { echo "spark.authenticate=true"
       echo "spark.authenticate.secret=$(cat "$dir/secret")"
       echo "spark.ui.enabled=false"
       for line in "$@"; do echo "$line"; done
     } >"$dir/$name.properties")
}

launch() {  # DIR NAME CMD...: run CMD in its own session, log to DIR/NAME.log, pid in DIR/NAME.pid
    local dir=$1 name=$2
    shift 2
    # setsid: its own session, so a Ctrl-C meant for the caller does not stop it
    setsid "$@" >>"$dir/$name.log" 2>&1 </dev/null &
    echo $! >"$dir/$name.pid"
}

wait_for() {  # DIR NAME PORT WHAT: up to 120 s for PORT to accept (JVMs on a busy machine are slow)
    local dir=$1 name=$2 port=$3
    for _ in $(seq 600); do
        if listening "$port" && { [ "$name" != worker ] || grep -qs "Successfully registered with master" "$dir/worker.log"; }; then
            return 0
        fi
        # alive, not running_pid: just after the fork its command line is still bash's
        kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null || break
        sleep 0.2
    done
    echo "spark.sh: the $name on $dir did not come up; log tail:" >&2
    tail -n 30 "$dir/$name.log" >&2 || true
    return 1
}

stop_one() {  # DIR NAME
    local dir=$1 name=$2 pid
    if pid=$(running_pid "$dir" "$name"); then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do running_pid "$dir" "$name" >/dev/null || break; sleep 0.1; done
        if running_pid "$dir" "$name" >/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 50); do running_pid "$dir" "$name" >/dev/null || break; sleep 0.1; done
            ! running_pid "$dir" "$name" >/dev/null || die "$name (pid $pid) survived SIGKILL"
        fi
    fi
    rm -f "$dir/$name.pid"
}

cmd=${1:-}
case "$cmd" in
start)
    [ $# -ge 2 ] && [ $# -le 4 ] || die "usage: $0 start DIR [MASTER_PORT [CONNECT_PORT]]"
    mkdir -p "$2"
    chmod 700 "$2"
    dir=$(cd "$2" && pwd) mport=${3:-7077} cport=${4:-15002}
    command -v java >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ] || die "java not found (Spark needs Java 17+)"
    home=$(spark_home)
    export SPARK_HOME=$home SPARK_LOCAL_IP=127.0.0.1 SPARK_DAEMON_MEMORY=256m PYSPARK_PYTHON=$PY
    export SPARK_CONF_DIR=$dir/conf SPARK_WORKER_DIR=$dir/work SPARK_LOCAL_DIRS=$dir/tmp
    mkdir -p "$dir/conf" "$dir/work" "$dir/tmp"
    [ -s "$dir/secret" ] || (umask 077; od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$dir/secret")
    master=spark://127.0.0.1:$mport
    if ! running_pid "$dir" master >/dev/null; then
        ! listening "$mport" || die "port $mport is already taken by another server"
        write_props "$dir" master "spark.master.rest.enabled=false"
        launch "$dir" master "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
            --host 127.0.0.1 --port "$mport" --webui-port 0 --properties-file "$dir/master.properties"
        wait_for "$dir" master "$mport" || { "$0" stop "$dir"; exit 1; }
    fi
    if ! running_pid "$dir" worker >/dev/null; then
        write_props "$dir" worker
        [ ! -f "$dir/worker.log" ] || mv "$dir/worker.log" "$dir/worker.log.$(date +%s%N)"
        launch "$dir" worker "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
            --host 127.0.0.1 --webui-port 0 --cores 4 --memory 2g --work-dir "$dir/work" \
            --properties-file "$dir/worker.properties" "$master"
        wait_for "$dir" worker "$mport" || { "$0" stop "$dir"; exit 1; }
    fi
    if ! running_pid "$dir" connect >/dev/null; then
        ! listening "$cport" || die "port $cport is already taken by another server"
        write_props "$dir" connect "spark.cores.max=1" "spark.executor.memory=512m" \
            "spark.driver.memory=512m" "spark.connect.grpc.binding.address=127.0.0.1" \
            "spark.connect.grpc.binding.port=$cport" \
            "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" \
            "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        # (the launcher sizes a Connect server's heap by SPARK_DAEMON_MEMORY, as a daemon's)
        SPARK_CONNECT_AUTHENTICATE_TOKEN=$(cat "$dir/secret") SPARK_DAEMON_MEMORY=512m \
            launch "$dir" connect "$home/bin/spark-submit" --master "$master" \
            --properties-file "$dir/connect.properties" --name "bittern spark.sh Connect server" \
            --class org.apache.spark.sql.connect.service.SparkConnectServer
        wait_for "$dir" connect "$cport" || { "$0" stop "$dir"; exit 1; }
    fi
    cat >"$dir/urls" <<EOF
SPARK_MASTER_URL=$master
SPARK_CONNECT_URL=sc://localhost:$cport
SPARK_SECRET_FILE=$dir/secret
EOF
    cat "$dir/urls"
    ;;
stop)
    [ $# -eq 2 ] || [ $# -eq 3 ] || die "usage: $0 stop DIR [master|worker|connect]"
    dir=$(cd "$2" 2>/dev/null && pwd) || exit 0  # no dir: nothing ever ran there
    case "${3:-all}" in
    all) for name in connect worker master; do stop_one "$dir" "$name"; done ;;
    master|worker|connect) stop_one "$dir" "$3" ;;
    *) die "stop: unknown part '$3' (master, worker or connect)" ;;
    esac
    ;;
status)
    [ $# -eq 2 ] || die "usage: $0 status DIR"
    dir=$(cd "$2" 2>/dev/null && pwd) || exit 1
    for name in master worker connect; do running_pid "$dir" "$name" >/dev/null || exit 1; done
    ;;
*)
    die "usage: $0 start DIR [MASTER_PORT [CONNECT_PORT]] | stop DIR [master|worker|connect] | status DIR"
    ;;
esac
