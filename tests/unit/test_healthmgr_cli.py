"""``bittern healthmgr NAME`` and the health manager's lines in ``bittern top``, from
the ``healthmgr`` part of a metrics document."""
from __future__ import annotations

import argparse
import json

from rich.console import Console

from bittern.cli import healthmgr
from bittern.cli.main import parser
from bittern.tui.render import render
from streammgr.healthrunner import HealthRunner

from .health_docs import CONF, bolt, topo
from .test_health_runner import Clock, World


def health_doc():
    clock, w = Clock(), World(par=2, load=4.0)
    r = HealthRunner("t", CONF, lambda: w.doc(clock()), w.restart, w.scale, clock=clock)
    r.tick()
    r.wait(5)
    clock.t = 1.0
    r.tick()
    doc = topo([bolt(), bolt()], [bolt()])
    doc.update(phase="RUNNING", active=True, reliability="ATLEAST_ONCE", containers=1, healthmgr=r.describe())
    return doc


class Source:
    def __init__(self, doc):
        self.doc = doc

    def metrics(self, name, window):
        return self.doc

    def close(self):
        pass


def test_cli_prints_symptoms_diagnosis_action_outcome(capsys):
    args = argparse.Namespace(name="t", limit=20, json=False, verbose=True)
    assert healthmgr.show(args, Source(health_doc())) == 0
    out = capsys.readouterr().out
    assert "health manager on" in out and "decision #1 waiting to be judged" in out
    assert "UNDER_PROVISIONED split: scale split 2 -> 4 [PENDING]" in out
    assert "symptoms BACKPRESSURE" in out and "symptom BACKPRESSURE split" in out


def test_cli_json_and_health_manager_off(capsys):
    args = argparse.Namespace(name="t", limit=1, json=True, verbose=False)
    healthmgr.show(args, Source(health_doc()))
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["decisions"]) == 1 and doc["decisions"][0]["action"]["parallelism_to"] == 4
    args.json = False
    healthmgr.show(args, Source(topo([bolt()], [bolt()])))
    assert "health manager is off" in capsys.readouterr().out


def test_registered_as_a_verb():
    a = parser().parse_args(["healthmgr", "t", "--json"])
    assert a.func is healthmgr.main and a.remote is healthmgr.remote_main


def test_top_shows_the_last_decisions():
    c = Console(width=160, record=True)
    c.print(render(health_doc(), live=False))
    text = c.export_text()
    assert "health manager  judging #1" in text
    assert "scale split 2 -> 4 [PENDING]" in text
    c = Console(width=160, record=True)
    c.print(render(topo([bolt()], [bolt()]), live=False))
    assert "health manager" not in c.export_text()
