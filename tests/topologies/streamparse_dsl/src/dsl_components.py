"""Components of the DSL translation tests (never run: tests/unit/test_streamparse_dsl.py
only builds their topologies)."""
from streamparse import Bolt, Spout, Stream


class Source(Spout):
    outputs = [Stream(fields=["n"]), Stream(fields=["word", "n"], name="words"),
               Stream(fields=["n"], name="picked", direct=True)]


class DirectOnly(Spout):
    outputs = [Stream(fields=["n"], direct=True)]  # its default stream is direct


class Route(Bolt):
    outputs = ["x"]


class NotAComponent:
    pass
