"""What the health manager's stages pass to each other, and its settings."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bittern.config import defaults
from bittern.errors import ConfigError

# symptom kinds (detectors.py)
BACKPRESSURE = "BACKPRESSURE"  # a component's instances caused backpressure
INSTANCE_BACKPRESSURE = "INSTANCE_BACKPRESSURE"  # one instance did
UNATTRIBUTED_BACKPRESSURE = "UNATTRIBUTED_BACKPRESSURE"  # spouts throttled, no instance measured as cause
LARGE_QUEUE = "LARGE_QUEUE"  # bytes queued toward an instance above the threshold
GROWING_QUEUE = "GROWING_QUEUE"  # ... and growing between rounds
PROCESSING_RATE_SKEW = "PROCESSING_RATE_SKEW"  # execute rates of a component's instances differ
QUEUE_SKEW = "QUEUE_SKEW"  # their queues (or the backpressure they cause) differ
LOW_UTILIZATION = "LOW_UTILIZATION"  # every instance of a bolt is mostly idle
EXCESS_PARALLELISM = "EXCESS_PARALLELISM"  # the true-rate model (ds2.py) needs fewer tasks than it has

# diagnosis kinds (diagnosers.py)
UNDER_PROVISIONED = "UNDER_PROVISIONED"
SLOW_INSTANCE = "SLOW_INSTANCE"
DATA_SKEW = "DATA_SKEW"
OVER_PROVISIONED = "OVER_PROVISIONED"

# action kinds (resolvers.py)
SCALE, RESTART, REPORT = "scale", "restart", "report"

# outcomes (manager.py)
PENDING = "PENDING"  # the action is to be carried out; its effect is checked after the wait
HELPED = "HELPED"
DID_NOT_HELP = "DID_NOT_HELP"
UNKNOWN = "UNKNOWN"  # the metrics after the wait cannot tell
FELL_SHORT = "FELL_SHORT"  # it improved things but did not deliver what it promised: corrected from fresh rates
FAILED = "FAILED"  # the action could not be carried out
REPORTED = "REPORTED"  # a report: nothing to carry out
BLACKLISTED = "BLACKLISTED"  # the diagnosis stands, but its action did not help before


@dataclass(frozen=True)
class Symptom:
    kind: str
    component: str | None
    task: int | None = None
    evidence: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class Diagnosis:
    kind: str
    component: str
    task: int | None = None
    symptoms: tuple = ()
    evidence: dict = field(default_factory=dict)

    def to_dict(self):
        return {"kind": self.kind, "component": self.component, "task": self.task,
                "symptoms": [s.to_dict() for s in self.symptoms], "evidence": dict(self.evidence)}


@dataclass(frozen=True)
class Action:
    kind: str  # SCALE | RESTART | REPORT
    component: str
    task: int | None = None
    parallelism_from: int | None = None
    parallelism_to: int | None = None
    reason: str = ""
    # a scale of several components at once: component -> [from, to], ``component`` first
    # (empty: ``component`` alone, parallelism_from -> parallelism_to)
    targets: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)

    def scales(self):
        """component -> the parallelism a SCALE sets ({} for other kinds)."""
        if self.kind != SCALE:
            return {}
        if self.targets:
            return {c: int(ft[1]) for c, ft in self.targets.items()}
        return {self.component: self.parallelism_to}

    def froms(self):
        """component -> the parallelism it had before a SCALE."""
        if self.targets:
            return {c: ft[0] for c, ft in self.targets.items()}
        return {self.component: self.parallelism_from}


_KEYS = {  # attribute -> config key
    "enabled": "topology.healthmgr.enabled",
    "interval_secs": "topology.healthmgr.interval.secs",
    "post_action_wait_secs": "topology.healthmgr.post.action.wait.secs",
    "backpressure_threshold": "topology.healthmgr.backpressure.threshold",
    "queue_bytes_threshold": "topology.healthmgr.queue.bytes.threshold",
    "queue_growth_threshold": "topology.healthmgr.queue.growth.bytes.per.sec",
    "skew_ratio": "topology.healthmgr.skew.ratio",
    "low_utilization": "topology.healthmgr.low.utilization",
    "sustained_windows": "topology.healthmgr.sustained.windows",
    "target_utilization": "topology.healthmgr.target.utilization",
    "scale_down_windows": "topology.healthmgr.scale.down.windows",
    "max_parallelism": "topology.healthmgr.max.parallelism",
}


@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    interval_secs: float = 60.0
    post_action_wait_secs: float = 60.0
    backpressure_threshold: float = 0.02
    queue_bytes_threshold: float = 1048576
    queue_growth_threshold: float = 16384
    skew_ratio: float = 1.5
    low_utilization: float = 0.2
    sustained_windows: int = 3
    target_utilization: float = 0.7
    scale_down_windows: int = 3
    max_parallelism: int = 32

    @classmethod
    def from_config(cls, conf=None):
        """Settings from a topology config (missing keys take the packaged defaults)."""
        if isinstance(conf, Settings):
            return conf
        conf = {**defaults(), **(conf or {})}
        s = cls(
            enabled=bool(conf["topology.healthmgr.enabled"]),
            interval_secs=float(conf["topology.healthmgr.interval.secs"]),
            post_action_wait_secs=float(conf["topology.healthmgr.post.action.wait.secs"]),
            backpressure_threshold=float(conf["topology.healthmgr.backpressure.threshold"]),
            queue_bytes_threshold=float(conf["topology.healthmgr.queue.bytes.threshold"]),
            queue_growth_threshold=float(conf["topology.healthmgr.queue.growth.bytes.per.sec"]),
            skew_ratio=float(conf["topology.healthmgr.skew.ratio"]),
            low_utilization=float(conf["topology.healthmgr.low.utilization"]),
            sustained_windows=int(conf["topology.healthmgr.sustained.windows"]),
            target_utilization=float(conf["topology.healthmgr.target.utilization"]),
            scale_down_windows=int(conf["topology.healthmgr.scale.down.windows"]),
            max_parallelism=int(conf["topology.healthmgr.max.parallelism"]))
        s.validate()
        return s

    def validate(self):
        def bad(attr, why):
            raise ConfigError(f"{_KEYS[attr]} {why}, got {getattr(self, attr)!r}")
        if not 0 < self.backpressure_threshold < 1:
            bad("backpressure_threshold", "must be a fraction between 0 and 1")
        if self.skew_ratio <= 1:
            bad("skew_ratio", "must be > 1")
        if not 0 < self.target_utilization <= 1:
            bad("target_utilization", "must be a fraction above 0 and at most 1")
        if not 0 < self.low_utilization < self.target_utilization:
            bad("low_utilization", "must be > 0 and below topology.healthmgr.target.utilization")
        if self.sustained_windows < 1:
            bad("sustained_windows", "must be >= 1")
        if self.scale_down_windows < 1:
            bad("scale_down_windows", "must be >= 1")
        if self.max_parallelism < 1:
            bad("max_parallelism", "must be >= 1")
        for attr in ("interval_secs", "post_action_wait_secs", "queue_bytes_threshold", "queue_growth_threshold"):
            if getattr(self, attr) < 0:
                bad(attr, "must be >= 0")
