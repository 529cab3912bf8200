"""State managers: where topologies, assignments and plans live (DESIGN.md §6)."""
from .base import StateManager
from .local import LocalStateManager, default_home

__all__ = ["StateManager", "LocalStateManager", "default_home", "open_state"]


def open_state(where=None, **kwargs):
    """``zk://HOST:PORT[,HOST:PORT...][/ROOT]``: ZooKeeper (kazoo is imported only
    then: it is the optional "cluster" extra); anything else is a local home
    directory (None: $BITTERN_HOME)."""
    if where and where.startswith("zk://"):
        from .zk import ZkStateManager
        hosts, _, root = where[len("zk://"):].partition("/")
        return ZkStateManager(hosts, root="/" + (root or "bittern"), **kwargs)
    return LocalStateManager(where, **kwargs)
