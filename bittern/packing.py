"""Packing: assign task ids to components and tasks to containers (pure logic).

Task ids are numbered from 1 over the components sorted by name (as Storm does),
so they are the same in every process that computes them. Round-robin packing
(Heron's default) deals the tasks out over the containers in task-id order.
First-fit-decreasing packing (Heron's resource-aware one) places the tasks by
their RAM and CPU into as few containers of a given capacity as it can, so
memory-hungry tasks do not pile up in one container.
``pack`` chooses between them by ``topology.packing.algorithm``.
The CLI uses this in local mode; nimbus uses it in cluster mode.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import defaults
from .errors import ConfigError

ALGORITHMS = ("round_robin", "first_fit_decreasing")
RESOURCE_KEYS = {"ram_mb": "topology.component.ram.mb", "cpu": "topology.component.cpu"}
CAPACITY_KEYS = {"ram_mb": "topology.container.ram.mb", "cpu": "topology.container.cpu"}
_EPS = 1e-9  # cpu shares are floats: 10 x 0.1 must fit in 1.0


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


def first_fit_decreasing(parallelism, resources=None, num_containers=None, container_capacity=None,
                         default=None):
    """Place tasks, largest first, into the first container with room.

    ``resources`` is ``{component: {"ram_mb": x, "cpu": y}}``; a component or a
    resource it leaves out gets ``default`` (the ``topology.component.*`` defaults when
    None). ``container_capacity`` is ``{"ram_mb": x, "cpu": y}`` (the
    ``topology.container.*`` defaults when None). Tasks go in order of decreasing RAM,
    then CPU, then increasing task id, so the plan is deterministic; a container is
    opened only when no open one has room. ``num_containers``, when given, is the most
    containers the plan may use. Task ids are those of :func:`assign_tasks`.
    """
    task_component, task_index = assign_tasks(parallelism)
    need = _resources(parallelism, resources or {}, default)
    cap = _capacity(container_capacity)
    for comp in sorted(parallelism):
        for r in ("ram_mb", "cpu"):
            if need[comp][r] > cap[r] + _EPS:
                raise ConfigError(f"component {comp!r}: one task needs {r} = {need[comp][r]:g}, more than "
                                  f"a container holds ({CAPACITY_KEYS[r]} = {cap[r]:g})")
    order = sorted(task_component, key=lambda t: (-need[task_component[t]]["ram_mb"],
                                                  -need[task_component[t]]["cpu"], t))
    containers, used = [], []  # [task ids], [[ram, cpu]] per container, in opening order
    for tid in order:
        ram, cpu = need[task_component[tid]]["ram_mb"], need[task_component[tid]]["cpu"]
        for c, (uram, ucpu) in enumerate(used):
            if uram + ram <= cap["ram_mb"] + _EPS and ucpu + cpu <= cap["cpu"] + _EPS:
                break
        else:
            c = len(used)
            if num_containers is not None and c >= int(num_containers):
                raise ConfigError(f"the tasks need more than {int(num_containers)} container(s) of "
                                  f"{cap['ram_mb']:g} MB and {cap['cpu']:g} CPU")
            containers.append([])
            used.append([0.0, 0.0])
        containers[c].append(tid)
        used[c][0] += ram
        used[c][1] += cpu
    return PackingPlan(task_component, task_index, {c: sorted(ts) for c, ts in enumerate(containers)})


def pack(topology, config=None):
    """The packing plan of ``topology`` (a TopologyDef, or ``{component: parallelism}``)
    with the algorithm named by ``topology.packing.algorithm`` in ``config`` (the merged
    topology config; a missing key takes its default).

    round_robin uses ``topology.stmgrs`` containers. first_fit_decreasing uses as many
    containers as the resources need (``topology.stmgrs`` is not used: read the count
    from the plan). A task's resources are, from strongest to weakest: its component's
    own ``topology.component.ram.mb`` / ``topology.component.cpu`` config, the
    component's entry in ``topology.component.resources``, the topology's
    ``topology.component.ram.mb`` / ``topology.component.cpu``.
    """
    conf = defaults()
    conf.update(config or {})
    components = getattr(topology, "components", None)
    if components is not None:
        parallelism = {c.name: c.par for c in components.values()}
        comp_conf = {c.name: c.config or {} for c in components.values()}
    else:
        parallelism, comp_conf = dict(topology), {}
    algo = str(conf["topology.packing.algorithm"]).lower()
    if algo == "round_robin":
        return round_robin(parallelism, conf["topology.stmgrs"])
    if algo != "first_fit_decreasing":
        raise ConfigError(f"topology.packing.algorithm must be one of {', '.join(ALGORITHMS)}, "
                          f"got {conf['topology.packing.algorithm']!r}")
    table = conf["topology.component.resources"]
    if not isinstance(table, dict):
        raise ConfigError(f"topology.component.resources must be a table {{component: {{ram_mb, cpu}}}}, "
                          f"got {table!r}")
    resources = dict(table)
    for comp, cc in comp_conf.items():
        own = {r: cc[key] for r, key in RESOURCE_KEYS.items() if key in cc}
        if own:
            base = resources.get(comp)
            resources[comp] = {**(base if isinstance(base, dict) else {}), **own}
    default = {r: conf[key] for r, key in RESOURCE_KEYS.items()}
    capacity = {r: conf[key] for r, key in CAPACITY_KEYS.items()}
    return first_fit_decreasing(parallelism, resources, None, capacity, default)


def _number(val, what):
    if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0:
        raise ConfigError(f"{what} must be a number >= 0, got {val!r}")
    return float(val)


def _resources(parallelism, resources, default):
    d = defaults()
    default = {**{r: d[key] for r, key in RESOURCE_KEYS.items()}, **(default or {})}
    base = {r: _number(default[r], f"default {r}") for r in RESOURCE_KEYS}
    unknown = sorted(set(resources) - set(parallelism))
    if unknown:
        raise ConfigError(f"resources are given for {unknown[0]!r}, which is not a component of the topology")
    out = {}
    for comp in parallelism:
        res = resources.get(comp) or {}
        if not isinstance(res, dict):
            raise ConfigError(f"component {comp!r}: resources must be {{ram_mb, cpu}}, got {res!r}")
        bad = sorted(set(res) - set(RESOURCE_KEYS))
        if bad:
            raise ConfigError(f"component {comp!r}: unknown resource {bad[0]!r} (known: ram_mb, cpu)")
        out[comp] = {r: _number(res[r], f"component {comp!r}: {r}") if r in res else base[r]
                     for r in RESOURCE_KEYS}
    return out


def _capacity(capacity):
    d = defaults()
    capacity = {**{r: d[key] for r, key in CAPACITY_KEYS.items()}, **(capacity or {})}
    bad = sorted(set(capacity) - set(CAPACITY_KEYS))
    if bad:
        raise ConfigError(f"container capacity: unknown resource {bad[0]!r} (known: ram_mb, cpu)")
    return {r: _number(capacity[r], f"container {r}") for r in CAPACITY_KEYS}
