"""The driver helper of ``spout.spark.master = spark://HOST:PORT``: one per topology and
machine, started by the first spout task that needs it (:meth:`HelperDir.attach`), in
its own session, so a spout task killed with -9 does not take the application down
with it.

``python -m bittern.spark.driver DIR``: reads ``DIR/settings.json``, starts a Spark
Connect server (``spark-submit --class ...SparkConnectServer``, client deploy mode:
the driver is this helper's child JVM, the executors run on the cluster's workers)
bound to 127.0.0.1 on a free port with a random token, writes ``DIR/server.json``
once the port answers, then every second looks at the registered task processes
(``DIR/clients``). It stops the JVM and exits when none has been alive for
``linger`` seconds, or when the JVM exits (the next task to attach starts a new
helper). SIGTERM stops it at once.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

from .cluster import HelperDir, free_port, helper_should_stop, is_listening, spark_home, stop_process

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _props(path, conf):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for k, v in conf.items():
            f.write(f"{k}={str(v).replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}\n")


def _die_with_parent():
    """In the JVM's process before exec: SIGKILL when this helper dies, even by kill -9
    (Linux PR_SET_PDEATHSIG survives the exec of spark-submit and of java)."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def log(msg):
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} driver helper {os.getpid()}: {msg}", flush=True)


def main(path):
    hd = HelperDir.__new__(HelperDir)
    hd.path = path
    s = hd.read_json("settings.json")
    port, token = free_port(), secrets.token_hex(24)
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
            "spark.executor.memory": "512m", "spark.driver.extraJavaOptions": s["java_options"],
            "spark.executor.extraJavaOptions": s["java_options"]}
    if s.get("secret_file"):
        with open(s["secret_file"], encoding="utf-8") as f:
            conf.update({"spark.authenticate": "true", "spark.authenticate.secret": f.read().strip()})
    conf.update(s.get("conf") or {})
    _props(hd.file("connect.properties"), conf)
    home = spark_home()
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", SPARK_CONNECT_AUTHENTICATE_TOKEN=token,
               SPARK_DAEMON_MEMORY=s["driver_memory"], PYSPARK_PYTHON=sys.executable,
               SPARK_CONF_DIR=hd.file("conf"), SPARK_LOCAL_DIRS=hd.file("tmp"))
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_SUBMIT_ARGS"):
        env.pop(k, None)
    os.makedirs(hd.file("conf"), mode=0o700, exist_ok=True)
    os.makedirs(hd.file("tmp"), mode=0o700, exist_ok=True)
    cmd = [os.path.join(home, "bin", "spark-submit"), "--master", s["master"], "--properties-file",
           hd.file("connect.properties"), "--name", f"bittern-{s['topology']}-spout", "--class", CONNECT_CLASS]
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM"))
    jvm = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=sys.stdout, stderr=sys.stderr,
                           preexec_fn=_die_with_parent)
    log(f"started the Spark Connect driver (pid {jvm.pid}) for {s['master']} on 127.0.0.1:{port}")
    idle, served = None, False
    try:
        while not stopping:
            if not served and jvm.poll() is None and is_listening(port):
                hd.write_json("server.json", {"port": port, "token": token, "jvm": jvm.pid})
                served = True
                log("serving")
            with hd.locked():
                what, idle = helper_should_stop(hd.live_clients(), jvm.poll() is None, idle, time.monotonic(),
                                                float(s["linger"]))
                if what == "stop":
                    log(f"stopping: {idle}")
                    hd.remove("server.json")
                    hd.remove("helper.pid")
                    break
            time.sleep(0.5 if not served else 1.0)
    finally:
        hd.remove("server.json")
        stop_process(jvm)
        log(f"the driver JVM exited ({jvm.returncode})")
        hd.remove("connect.properties")  # (it holds the cluster's secret)
        shutil.rmtree(hd.file("tmp"), ignore_errors=True)
        doc = hd.read_json("helper.pid")
        if doc and doc.get("pid") == os.getpid():
            hd.remove("helper.pid")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
