#!/usr/bin/env bash
# A private, standalone ZooKeeper for cluster mode and its tests: Debian's package
# run as a plain background process from a generated config (no systemd, no
# /etc/zookeeper, no fixed port), so several can run side by side in temp dirs.
#
#   scripts/zookeeper.sh install          install Debian's zookeeper (+ a JRE) if missing
#   scripts/zookeeper.sh start DIR PORT   run one on 127.0.0.1:PORT with data in DIR
#   scripts/zookeeper.sh stop DIR         stop the one started on DIR
#   scripts/zookeeper.sh status DIR PORT  exit 0 if it answers "imok" and serves
set -euo pipefail

JAVA_DIR=/usr/share/java
ZK_JAR=$JAVA_DIR/zookeeper.jar
# The Debian jar's manifest names its dependencies (netty, jute, metrics, ...);
# slf4j-simple is not among them, and without a binding the server logs nothing.
CLASSPATH_=$ZK_JAR:$JAVA_DIR/slf4j-simple.jar

die() { echo "zookeeper.sh: $*" >&2; exit 1; }

apt_install() {  # PACKAGE: only root may install; everyone else is told what is missing
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        die "missing Debian package '$1' (install it with: apt-get install $1)"
    fi
    echo "zookeeper.sh: installing $1 with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}

# Answer of a four-letter-word command (empty if nothing listens). bash's /dev/tcp
# avoids a dependency on nc; the server closes the connection after answering.
four_letter() {  # PORT WORD
    timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$0 && printf %s "$1" >&3 && cat <&3' \
        "$1" "$2" 2>/dev/null || true
}

# "imok" comes ~0.2 s before the server accepts sessions (connections are dropped
# meanwhile); "srvr" shows a Mode line only once it serves requests.
ready() {  # PORT
    [ "$(four_letter "$1" ruok)" = imok ] && four_letter "$1" srvr | grep -q '^Mode: '
}

running_pid() {  # DIR: the pid from DIR/zookeeper.pid if that process is still our server
    local pid
    pid=$(cat "$1/zookeeper.pid" 2>/dev/null) || return 1
    # A stale pid file may name a recycled pid: check it is a java with our config.
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF " $1/zoo.cfg " || return 1
    echo "$pid"
}

cmd=${1:-}
case "$cmd" in
install)
    [ -f "$ZK_JAR" ] || apt_install zookeeper
    command -v java >/dev/null 2>&1 || apt_install default-jre-headless
    ;;
start)
    [ $# -eq 3 ] || die "usage: $0 start DIR PORT"
    mkdir -p "$2"
    dir=$(cd "$2" && pwd) port=$3  # absolute: the pid check matches it in the cmdline
    [ -f "$ZK_JAR" ] || die "$ZK_JAR not found (run: $0 install)"
    command -v java >/dev/null 2>&1 || die "java not found (run: $0 install)"
    if pid=$(running_pid "$dir"); then
        ready "$port" && exit 0
        die "a server (pid $pid) already runs on $dir but not on port $port"
    fi
    # Another server on this port would answer our ruok and pass for this one.
    [ -z "$(four_letter "$port" ruok)" ] || die "port $port is already taken by another server"
    mkdir -p "$dir/data"
    # Short ticks and a 1 s minimum session let tests see a dead client's session
    # end within seconds; the whitelist enables ruok/srvr; the admin server would
    # take port 8080.
    cat >"$dir/zoo.cfg" <<EOF
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
EOF
    # setsid: its own session, so a Ctrl-C meant for the caller (a shell, pytest)
    # does not kill it while that caller still uses it; "stop" does.
    setsid java -Xmx256m -cp "$CLASSPATH_" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
        >>"$dir/zookeeper.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/zookeeper.pid"
    # Up to 120 s by the clock: a cold JVM on a loaded machine is slow (beside a CPU hog
    # and the test suite, one served only after the 150 tries of 0.2 s, 30 s or more,
    # that this used to allow), and a bound in seconds says what it allows.
    wait_secs=120
    deadline=$((SECONDS + wait_secs))
    why="did not serve within ${wait_secs}s"
    while [ "$SECONDS" -lt "$deadline" ]; do
        ready "$port" && exit 0
        # the launched pid, not running_pid: just after the fork the child's command line
        # is still bash's, not yet the server's. (kill -0 is enough: this shell reaps a
        # child that exits as soon as it is told, so no zombie answers it; spark.sh likewise)
        kill -0 "$pid" 2>/dev/null || { why="exited before it served"; break; }
        sleep 0.2
    done
    ready "$port" && exit 0  # one last look: the deadline may have passed in the sleep
    echo "zookeeper.sh: server on $dir (port $port) $why; log tail:" >&2
    tail -n 30 "$dir/zookeeper.log" >&2 || true
    "$0" stop "$dir" || true
    exit 1
    ;;
stop)
    [ $# -eq 2 ] || die "usage: $0 stop DIR"
    dir=$(cd "$2" 2>/dev/null && pwd) || exit 0  # no dir: nothing ever ran there
    # Liveness by running_pid, not kill -0: a dead server that nobody reaped yet
    # (a zombie) still answers kill -0, but its cmdline is empty.
    if pid=$(running_pid "$dir"); then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do  # 5 s for a clean shutdown, then force it
            running_pid "$dir" >/dev/null || break
            sleep 0.1
        done
        if running_pid "$dir" >/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 50); do running_pid "$dir" >/dev/null || break; sleep 0.1; done
            ! running_pid "$dir" >/dev/null || die "pid $pid survived SIGKILL"
        fi
    fi
    rm -f "$dir/zookeeper.pid"
    ;;
status)
    [ $# -eq 3 ] || die "usage: $0 status DIR PORT"
    ready "$3"
    ;;
*)
    die "usage: $0 install | start DIR PORT | stop DIR | status DIR PORT"
    ;;
esac
