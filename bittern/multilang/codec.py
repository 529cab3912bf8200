"""Framing of Storm's multilang protocol, both ways, as pure byte codecs.

* ``json``: each message is UTF-8 JSON followed by a line holding only ``end``
  (Storm's ShellBolt/ShellSpout and storm.py).
* ``msgpack``: each message is one msgpack object, back to back, no delimiter
  (pystorm's ``-s msgpack`` serializer).

``encode(msg) -> bytes``; a decoder is fed bytes as they arrive and returns the
complete messages in them. Something that is not a protocol message (a stray
``print()`` in the component) raises :class:`ProtocolError` carrying the
offending text, as early as it can be told apart from a message.
"""
from __future__ import annotations

import json

import msgpack

SERIALIZERS = ("json", "msgpack")
_END = b"end"
_SHOW = 300  # characters of offending output shown in an error


class ProtocolError(Exception):
    """The component wrote something that is not a multilang message."""

    def __init__(self, reason, offending=b""):
        text = offending.decode("utf-8", "replace") if isinstance(offending, bytes) else str(offending)
        if len(text) > _SHOW:
            text = text[:_SHOW] + "..."
        self.reason = reason
        self.offending = text
        super().__init__(f"{reason}: {text!r}" if text else reason)


class JsonCodec:
    name = "json"

    def __init__(self):
        self._buf = bytearray()
        self._lines = []  # lines of the message being read

    @staticmethod
    def encode(msg):
        return json.dumps(msg, separators=(",", ":"), default=str).encode() + b"\nend\n"

    def feed(self, data):
        self._buf += data
        out = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                self._check_start(bytes(self._buf), partial=True)
                return out
            line = bytes(self._buf[:nl]).rstrip(b"\r")
            del self._buf[:nl + 1]
            if line == _END:
                raw = b"\n".join(self._lines)
                self._lines = []
                out.append(self._parse(raw))
            elif self._lines or line.strip():  # blank lines between messages are tolerated
                if not self._lines:
                    self._check_start(line)
                self._lines.append(line)

    def _check_start(self, line, partial=False):
        """A message is a JSON object (or a task-id list): its first character tells."""
        if self._lines:
            return
        s = line.lstrip()
        if s and s[:1] not in (b"{", b"["):
            raise ProtocolError("not a multilang message (a JSON object followed by a line 'end')",
                                line if not partial else line[:_SHOW])

    @staticmethod
    def _parse(raw):
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ProtocolError(f"invalid JSON in a multilang message ({e})", raw) from None

    def pending(self):
        """Bytes or lines received that do not make a whole message yet."""
        return bytes(self._buf) + b"\n".join(self._lines)


class MsgpackCodec:
    name = "msgpack"

    def __init__(self):
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self._pending = 0

    @staticmethod
    def encode(msg):
        return msgpack.packb(msg, use_bin_type=True, default=str)

    def feed(self, data):
        self._unpacker.feed(data)
        self._pending += len(data)
        out = []
        try:
            for msg in self._unpacker:
                if not isinstance(msg, (dict, list)):
                    raise ProtocolError("not a multilang message (a msgpack map)", bytes(data))
                out.append(msg)
        except ProtocolError:
            raise
        except Exception as e:  # noqa: BLE001 - msgpack's errors for bad input vary by version
            raise ProtocolError(f"invalid msgpack in a multilang message ({type(e).__name__}: {e})",
                                bytes(data)) from None
        self._pending = 0 if out else self._pending
        return out

    def pending(self):
        return b"" if not self._pending else b"<%d bytes of an incomplete msgpack message>" % self._pending


def codec(name):
    """A fresh codec (encoder + stateful decoder) for serializer ``name``."""
    if name == "json":
        return JsonCodec()
    if name == "msgpack":
        return MsgpackCodec()
    raise ValueError(f"topology.multilang.serializer must be one of {', '.join(SERIALIZERS)}, got {name!r}")
