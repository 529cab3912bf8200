"""A task hook that counts the calls at each of heronpy's hook points and writes them,
with what the info objects held, when the task is cleaned up."""
from collections import Counter

from heronpy.api.task_hook import (BoltAckInfo, BoltExecuteInfo, BoltFailInfo, EmitInfo, ITaskHook,
                                   SpoutAckInfo, SpoutFailInfo)

from .output import write_json


class CountingHook(ITaskHook):
    label = "hook"  # the file: LABEL-COMPONENT-TASK.json

    def prepare(self, conf, context):
        self.conf = conf
        self.task = context.get_task_id()
        self.component = context.get_component_id()
        self.calls = Counter(prepare=1)
        self.wrong = Counter()  # info objects not as Heron fills them
        self.streams = Counter()
        self.acked_ids = []
        self.failed_ids = []

    def _check(self, info, kind, task, latency=None):
        if not isinstance(info, kind) or task != self.task:
            self.wrong[kind.__name__] += 1
        if latency is not None and not (isinstance(latency, float) and latency >= 0.0):
            self.wrong[kind.__name__ + ".latency"] += 1

    def clean_up(self):
        self.calls["clean_up"] += 1
        write_json(self.conf, f"{self.label}-{self.component}-{self.task}.json",
                   {"calls": self.calls, "wrong": self.wrong, "streams": self.streams,
                    "acked_ids": sorted(self.acked_ids), "failed_ids": sorted(self.failed_ids)})

    def emit(self, emit_info):
        self.calls["emit"] += 1
        self.streams[emit_info.stream_id] += 1
        self._check(emit_info, EmitInfo, emit_info.task_id)
        if emit_info.out_tasks is not None or not isinstance(emit_info.values, list):
            self.wrong["EmitInfo.fields"] += 1

    def spout_ack(self, spout_ack_info):
        self.calls["spout_ack"] += 1
        self.acked_ids.append(spout_ack_info.message_id)
        self._check(spout_ack_info, SpoutAckInfo, spout_ack_info.spout_task_id,
                    spout_ack_info.complete_latency_ms)

    def spout_fail(self, spout_fail_info):
        self.calls["spout_fail"] += 1
        self.failed_ids.append(spout_fail_info.message_id)
        self._check(spout_fail_info, SpoutFailInfo, spout_fail_info.spout_task_id,
                    spout_fail_info.fail_latency_ms)

    def bolt_execute(self, bolt_execute_info):
        self.calls["bolt_execute"] += 1
        self._check(bolt_execute_info, BoltExecuteInfo, bolt_execute_info.executing_task_id,
                    bolt_execute_info.execute_latency_ms)

    def bolt_ack(self, bolt_ack_info):
        self.calls["bolt_ack"] += 1
        self._check(bolt_ack_info, BoltAckInfo, bolt_ack_info.acking_task_id, bolt_ack_info.process_latency_ms)

    def bolt_fail(self, bolt_fail_info):
        self.calls["bolt_fail"] += 1
        self._check(bolt_fail_info, BoltFailInfo, bolt_fail_info.failing_task_id,
                    bolt_fail_info.fail_latency_ms)


class AutoHook(CountingHook):
    """The same, named in topology.auto.task.hooks (built by the instance)."""
    label = "autohook"
