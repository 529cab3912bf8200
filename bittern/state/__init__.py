"""State managers: where topologies, assignments and plans live (DESIGN.md §6)."""
from .base import StateManager
from .local import LocalStateManager, default_home

__all__ = ["StateManager", "LocalStateManager", "default_home"]
