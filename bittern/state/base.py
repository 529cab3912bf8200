"""The state-manager interface: a small tree of JSON documents.

Backends implement five primitives over slash-separated paths (``get``, ``put``,
``create`` (exclusive), ``delete`` (recursive), ``children``); the layout of the
tree is defined once here, so the local-directory backend and the ZooKeeper
backend hold the same documents at the same paths::

    topologies/NAME    the submitted topology: definition, config, desired state
    assignments/NAME   packing plan, endpoints, the supervisor that runs it
    status/NAME        what the topology master reports: phase, error, endpoint
    processes/NAME     pids of the topology's processes (local mode)
"""
from __future__ import annotations

from abc import ABC, abstractmethod


class StateManager(ABC):
    # -- primitives ---------------------------------------------------------------------
    @abstractmethod
    def get(self, path):
        """The document at ``path``, or None."""

    @abstractmethod
    def put(self, path, doc):
        """Write ``doc`` at ``path`` atomically (create or replace)."""

    @abstractmethod
    def create(self, path, doc):
        """Write ``doc`` only if ``path`` does not exist; True if it was created."""

    @abstractmethod
    def delete(self, path):
        """Remove ``path`` and everything below it; no error if absent."""

    @abstractmethod
    def children(self, path):
        """Names directly below ``path`` (documents and sub-trees), sorted."""

    def put_bytes(self, path, data):
        """Store binary ``data`` (any size) at ``path`` atomically; it lives beside
        the document at ``path`` (not a JSON document, not one of its children) and
        ``delete(path)`` removes it."""
        raise NotImplementedError

    def get_bytes(self, path):
        """The bytes stored by ``put_bytes`` at ``path``, or None."""
        raise NotImplementedError

    def close(self):
        """Release connections (nothing to do for a directory)."""

    # -- layout ---------------------------------------------------------------------------
    def topology(self, name):
        return self.get(f"topologies/{name}")

    def topologies(self):
        return self.children("topologies")

    def assignment(self, name):
        return self.get(f"assignments/{name}")

    def status(self, name):
        return self.get(f"status/{name}")

    def processes(self, name):
        return self.get(f"processes/{name}")

    def update(self, path, **fields):
        doc = self.get(path) or {}
        doc.update(fields)
        self.put(path, doc)
        return doc

    def remove_topology(self, name):
        """Everything the state manager holds of a topology (kill): its record and plans,
        its checkpoints' metadata, the health manager's log, a rebalance marker."""
        for d in ("topologies", "assignments", "status", "processes", "checkpoints", "healthmgr", "rebalance"):
            self.delete(f"{d}/{name}")
