"""Shared parts of the security suite (tests/test_security_cluster.py,
tests/test_security_local.py): a paced word count whose final counts can be checked
exactly, and the ways an attacker on the same host talks to Bittern's sockets."""
from __future__ import annotations

import collections
import json
import os
import socket
import struct

import zmq

# A word count whose spout sends SENTENCES[i % len] at ``sec.rate`` a second until the
# file ``<sec.out>/stop`` exists; it then writes ``<sec.out>/emitted.json`` ({"sentences": n})
# and sends nothing more. Each count task writes ``<sec.out>/counts-<task>.json`` as it
# closes (at kill). So the expected counts follow from n, whatever the attacks took.
PACED_WC = '''
import json
import os
import time

from bittern import Bolt, Grouping, Spout, Topology

SENTENCES = %r


class PacedSentences(Spout):
    outputs = ["sentence"]

    def initialize(self, config, context):
        self.out = config["sec.out"]
        self.every = 1.0 / float(config.get("sec.rate", 100))
        self.i, self.stopped, self.next_at = 0, False, time.monotonic()

    def next_tuple(self):
        if self.stopped:
            return
        if os.path.exists(os.path.join(self.out, "stop")):
            self.stopped = True
            tmp = os.path.join(self.out, ".emitted.json")
            with open(tmp, "w") as f:
                json.dump({"sentences": self.i}, f)
            os.replace(tmp, os.path.join(self.out, "emitted.json"))
            return
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = max(self.next_at + self.every, now - 1.0)
        self.emit([SENTENCES[self.i %% len(SENTENCES)]])
        self.i += 1


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class Count(Bolt):
    outputs = ["word", "count"]

    def initialize(self, config, context):
        self.out, self.task, self.counts = config["sec.out"], context.task_id, {}

    def process(self, tup):
        self.counts[tup.values[0]] = self.counts.get(tup.values[0], 0) + 1

    def close(self):
        tmp = os.path.join(self.out, ".counts-%%d.json" %% self.task)
        with open(tmp, "w") as f:
            json.dump(self.counts, f)
        os.replace(tmp, os.path.join(self.out, "counts-%%d.json" %% self.task))


class PacedWordCount(Topology):
    config = {"topology.stmgrs": 2}
    sentence = PacedSentences.spec(par=1)
    split = Split.spec(par=2, inputs=[sentence])
    count = Count.spec(par=2, inputs={split: Grouping.fields("word")})
'''

SENTENCES = ["the quick brown fox jumps over the lazy dog", "an apple a day keeps the doctor away",
             "all that glitters is not gold", "birds of a feather flock together",
             "the stream processor counts every word it sees"]


def write_topology(directory):
    """The paced word count as a file in ``directory``; its path."""
    path = os.path.join(directory, "paced_wc.py")
    with open(path, "w") as f:
        f.write(PACED_WC % (SENTENCES,))
    return path


def expected_counts(n):
    counts = collections.Counter()
    for i in range(n):
        counts.update(SENTENCES[i % len(SENTENCES)].split())
    return dict(counts)


def words_of(n):
    return sum(expected_counts(n).values())


def stop_spout(out):
    """Tell the spout to stop; the number of sentences it sent (waits for its answer)."""
    from conftest import wait_for
    open(os.path.join(out, "stop"), "w").close()
    path = os.path.join(out, "emitted.json")
    wait_for(lambda: os.path.exists(path), timeout=30, what="the spout to say how many sentences it sent")
    with open(path) as f:
        return json.load(f)["sentences"]


def final_counts(out):
    """The count tasks' files merged; asserts no word was counted by two tasks."""
    got = collections.Counter()
    files = sorted(f for f in os.listdir(out) if f.startswith("counts-"))
    for f in files:
        with open(os.path.join(out, f)) as fh:
            part = json.load(fh)
        assert not set(part) & set(got), f"a word counted by two tasks ({files})"
        got.update(part)
    return files, dict(got)


# -- talking to sockets as an attacker --------------------------------------------------------

def monitor_events(mon, timeout_ms):
    """Events of a zmq socket monitor for up to ``timeout_ms`` ms: a list of names."""
    import time
    out = []
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not mon.poll(int(left * 1000) + 1):
            return out
        frames = mon.recv_multipart()
        event = struct.unpack("=HI", frames[0][:6])[0] if len(frames[0]) >= 6 else 0
        out.append(EVENT_NAMES.get(event, hex(event)))


EVENT_NAMES = {getattr(zmq, n): n for n in dir(zmq) if n.startswith("EVENT_") and n != "EVENT_ALL"
               and isinstance(getattr(zmq, n), int)}


def raw_tcp(endpoint, payload, timeout=2.0):
    """Send ``payload`` over a plain TCP connection to ``tcp://host:port``; what came back
    (bytes, possibly b"") before the peer closed or ``timeout`` passed."""
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(payload)
        except OSError:
            return b""
        got = b""
        try:
            while len(got) < 4096:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        return got
