"""The health manager: Dhalion's policy loop for one topology, as pure stages.

    metrics document --sensors--> Measurements --detectors--> Symptoms
        --diagnosers--> Diagnoses --resolvers--> Actions (scale | restart | report)

:class:`manager.HealthManager` runs the stages once per round, takes at most one
action at a time, waits ``topology.healthmgr.post.action.wait.secs`` after it,
checks that it helped, and blacklists a (diagnosis, component) whose action did
not, so that it is never taken again (no oscillation). No stage does I/O: the
topology master feeds it metrics documents and carries out the actions.
"""
from .manager import HealthManager
from .model import Action, Diagnosis, Settings, Symptom
from .sensors import Measurements, measure

__all__ = ["Action", "Diagnosis", "HealthManager", "Measurements", "Settings", "Symptom", "measure"]
