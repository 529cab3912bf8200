"""Example spouts."""
from .multi_stream_spout import MultiStreamSpout
from .stateful_word_spout import StatefulWordSpout
from .word_spout import WordSpout

__all__ = ["MultiStreamSpout", "StatefulWordSpout", "WordSpout"]
