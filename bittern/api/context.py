"""The context a component receives in ``initialize(config, context)``.

Method names follow heronpy's ``TopologyContext`` (``get_task_id()``...), with
properties for the common cases.
"""
from __future__ import annotations


class TopologyContext:
    def __init__(self, topology_name, task_id, component, task_index, container, config,
                 component_tasks, task_component, tdef):
        self.topology_name = topology_name
        self.task_id = task_id
        self.component = component
        self.task_index = task_index
        self.container = container
        self.config = config
        self._component_tasks = component_tasks
        self._task_component = task_component
        self._tdef = tdef
        self.user_metrics = {}  # name -> metric (see bittern.api.metrics)

    # heronpy names
    def get_task_id(self):
        return self.task_id

    def get_component_id(self):
        return self.component

    def get_topology_name(self):
        return self.topology_name

    def get_cluster_config(self):
        return dict(self.config)

    def get_component_tasks(self, component_id):
        return list(self._component_tasks.get(component_id, []))

    def get_task_component(self, task_id):
        return self._task_component.get(task_id)

    def get_sources(self, component_id):
        """``{(component, stream): grouping}`` that ``component_id`` subscribes to."""
        comp = self._tdef.components.get(component_id)
        if comp is None:
            return {}
        return {(i.component, i.stream): i.grouping for i in comp.inputs}

    def get_this_sources(self):
        return self.get_sources(self.component)

    def get_component_outputs(self, component_id=None):
        comp = self._tdef.components.get(component_id or self.component)
        return {s: list(d["fields"]) for s, d in comp.outputs.items()} if comp else {}

    def register_metric(self, name, metric, time_bucket_in_sec=None):
        """Report ``metric`` (a CountMetric, MultiCountMetric, MeanReducedMetric,
        AssignableMetric, or a callable) under ``name`` with the task's metrics.
        ``time_bucket_in_sec`` is accepted for heronpy compatibility; values are read
        every ``topology.metrics.interval.secs``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"metric name must be a non-empty string, got {name!r}")
        if not (hasattr(metric, "get_value_and_reset") or callable(metric)):
            raise TypeError(f"metric {name!r}: {metric!r} needs get_value_and_reset() or to be callable")
        self.user_metrics[name] = metric
        return metric

    def get_targets(self, stream="default"):
        """``{bolt: grouping}`` subscribed to this component's ``stream``."""
        return dict(self._tdef.subscribers(self.component, stream))

    def __repr__(self):
        return f"<TopologyContext {self.topology_name} {self.component}[{self.task_index}] task {self.task_id}>"
