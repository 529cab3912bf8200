"""Packing: assign task ids to components and tasks to containers (pure logic).

Task ids are numbered from 1 over the components sorted by name (as Storm does),
so they are the same in every process that computes them. Round-robin packing
(Heron's default) deals the tasks out over the containers in task-id order.
The CLI uses this in local mode; nimbus uses it in cluster mode.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PackingPlan:
    task_component: dict  # task id -> component name
    task_index: dict  # task id -> index of the task within its component
    containers: dict  # container id -> [task ids]

    @property
    def component_tasks(self):
        out = {}
        for t in sorted(self.task_component):
            out.setdefault(self.task_component[t], []).append(t)
        return out

    @property
    def task_container(self):
        return {t: c for c, ts in self.containers.items() for t in ts}

    def to_dict(self):
        return {"tasks": {str(t): [c, self.task_index[t]] for t, c in self.task_component.items()},
                "containers": {str(c): ts for c, ts in self.containers.items()}}

    @staticmethod
    def from_dict(d):
        tc = {int(t): v[0] for t, v in d["tasks"].items()}
        ti = {int(t): v[1] for t, v in d["tasks"].items()}
        return PackingPlan(tc, ti, {int(c): list(ts) for c, ts in d["containers"].items()})


def assign_tasks(parallelism):
    """``{component: par}`` → ``(task_component, task_index)`` with ids from 1."""
    task_component, task_index = {}, {}
    tid = 1
    for comp in sorted(parallelism):
        for i in range(parallelism[comp]):
            task_component[tid] = comp
            task_index[tid] = i
            tid += 1
    return task_component, task_index


def round_robin(parallelism, num_containers):
    """Deal tasks over ``min(num_containers, tasks)`` containers in task-id order."""
    task_component, task_index = assign_tasks(parallelism)
    n = max(1, min(int(num_containers), len(task_component)))
    containers = {c: [] for c in range(n)}
    for i, tid in enumerate(sorted(task_component)):
        containers[i % n].append(tid)
    return PackingPlan(task_component, task_index, containers)
