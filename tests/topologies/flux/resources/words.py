"""The sentences of the Flux word count (tests/test_flux.py computes its expected counts
from the same function)."""
import os
import sys

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]


def sentence(i):
    return " ".join(WORDS[(i * 5 + k) % len(WORDS)] for k in range(1 + i % 4))


def use_storm():
    """Put the tests' storm.py (tests/topologies/multilang/storm.py) on the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, os.pardir, os.pardir, "multilang"))
