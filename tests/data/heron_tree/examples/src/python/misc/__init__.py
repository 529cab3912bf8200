"""Helpers of the example topologies."""
from .counting_hook import AutoHook, CountingHook
from .output import write_json

__all__ = ["AutoHook", "CountingHook", "write_json"]
