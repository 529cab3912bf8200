"""Storm multilang components: spouts and bolts that are external commands.

Declare one in a topology like Storm's ``new ShellBolt("python3", "splitsentence.py")``
or streamparse's ``ShellBolt.spec(command=..., script=...)``::

    from bittern import Grouping, ShellBolt, Topology

    class WordCount(Topology):
        sentences = SentenceSpout.spec()
        split = ShellBolt.spec(command="python3", script="splitsentence.py", outputs=["word"],
                               inputs=[sentences], par=2)
        count = CountBolt.spec(inputs={split: Grouping.fields("word")})

The script is found beside the topology file (or in its ``resources/``); the command
runs there. The protocol codecs are in :mod:`bittern.multilang.codec`; the host
(the instance side) is ``instance/shell.py``.
"""
from __future__ import annotations

import shlex

from ..api.component import ComponentSpec
from ..errors import TopologyError
from .codec import SERIALIZERS, JsonCodec, MsgpackCodec, ProtocolError, codec

COMMAND_KEY = "multilang.command"
SCRIPT_KEY = "multilang.script"
SERIALIZER_KEY = "topology.multilang.serializer"


def _shell_config(kind, command, script, serializer, config):
    if isinstance(command, str):
        argv = shlex.split(command)
    elif isinstance(command, (list, tuple)) and all(isinstance(c, str) for c in command):
        argv = list(command)
    else:
        raise TopologyError(f"Shell{kind.title()}.spec: command must be a string or a list of strings, "
                            f"got {command!r}")
    if not argv:
        raise TopologyError(f"Shell{kind.title()}.spec: command is empty")
    if script is not None and (not isinstance(script, str) or not script):
        raise TopologyError(f"Shell{kind.title()}.spec: script must be a non-empty string, got {script!r}")
    conf = dict(config or {})
    conf[COMMAND_KEY] = argv
    conf[SCRIPT_KEY] = script or ""
    if serializer is not None:
        if serializer not in SERIALIZERS:
            raise TopologyError(f"Shell{kind.title()}.spec: serializer must be one of "
                                f"{', '.join(SERIALIZERS)}, got {serializer!r}")
        conf[SERIALIZER_KEY] = serializer
    return conf


def _spec(kind, command, script, outputs, name, par, inputs, config, serializer):
    from instance.shell import ShellBolt as BoltCls, ShellSpout as SpoutCls  # the runtime side
    spec = ComponentSpec(SpoutCls if kind == "spout" else BoltCls, kind, name=name, par=par,
                         inputs=inputs, config=_shell_config(kind, command, script, serializer, config))
    spec.optional_outputs = list(outputs or [])
    return spec


class ShellBolt:
    """A bolt that is an external command speaking Storm's multilang protocol."""

    @staticmethod
    def spec(command, script=None, outputs=None, name=None, inputs=None, par=1, config=None,
             serializer=None):
        """``command``: the program (a string, split like a shell would, or a list);
        ``script``: appended to it, resolved beside the topology file or in its
        ``resources/``; ``outputs``: field names or ``Stream`` objects, as a Python
        component's ``outputs``; ``serializer``: ``json`` (Storm) or ``msgpack``
        (pystorm's ``-s msgpack``), default ``topology.multilang.serializer``."""
        return _spec("bolt", command, script, outputs, name, par, inputs, config, serializer)


class ShellSpout:
    """A spout that is an external command speaking Storm's multilang protocol."""

    @staticmethod
    def spec(command, script=None, outputs=None, name=None, par=1, config=None, serializer=None):
        """As :meth:`ShellBolt.spec`, without inputs."""
        return _spec("spout", command, script, outputs, name, par, None, config, serializer)


__all__ = ["SERIALIZERS", "JsonCodec", "MsgpackCodec", "ProtocolError", "ShellBolt", "ShellSpout", "codec"]
