"""The checkpoint file format and its filesystem helpers (bittern/checkpoint.py has the
store: layout, chains, pruning). A file is a header then a payload::

    version 1 (a base):  magic "BTCK", version byte, payload length (8 bytes, big-endian),
                         CRC-32 of the payload (4 bytes)                 17 bytes
    version 2 (a delta): the same, then the parent checkpoint id (8 bytes), the CRC
                         covering the parent id and the payload          25 bytes

Files are written atomically (temp file, fsync, rename, fsync of the directory) by
the store; a reader checks all of the header and raises :class:`CheckpointCorrupt`
naming the file.
"""
from __future__ import annotations

import os
import struct
import zlib

from .errors import BitternError

MAGIC = b"BTCK"
FILE_VERSION = 1  # a base (full state)
CHAIN_VERSION = 2  # carries the parent checkpoint id (0: none, a base)
_HEADER = struct.Struct(">4sBQI")  # magic, version, payload length, crc32
_PARENT = struct.Struct(">Q")  # version 2: the parent checkpoint id, after the version-1 fields
HEADER_SIZE = _HEADER.size
HEADER2_SIZE = _HEADER.size + _PARENT.size


class CheckpointError(BitternError):
    """A checkpoint operation that cannot be done (names the checkpoint and task)."""


class CheckpointMissing(CheckpointError, FileNotFoundError):
    """No state was saved for that task in that checkpoint."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint file whose header or checksum does not match its contents."""


def _chunks(data):
    return list(data) if isinstance(data, (list, tuple)) else [data]


def file_header(chunks, parent=0):
    """The header of a file whose payload is ``chunks`` (byte strings, concatenated):
    version 1 for a base (``parent`` 0), version 2 naming the parent otherwise."""
    length = sum(len(c) for c in chunks)
    if not parent:
        crc = 0
        for c in chunks:
            crc = zlib.crc32(c, crc)
        return _HEADER.pack(MAGIC, FILE_VERSION, length, crc)
    p = _PARENT.pack(parent)
    crc = zlib.crc32(p)
    for c in chunks:
        crc = zlib.crc32(c, crc)
    return _HEADER.pack(MAGIC, CHAIN_VERSION, length, crc) + p


def write_payload(f, data, parent=0):
    """Write a file's header and payload to ``f``: ``data`` bytes, a list of byte chunks
    (written one after the other, never joined) or an iterator of them (streamed)."""
    if hasattr(data, "__next__"):
        return _stream_payload(f, data, parent)
    chunks = _chunks(data)
    f.write(file_header(chunks, parent))
    for c in chunks:  # (large writes release the GIL; no joined copy)
        f.write(c)
    return sum(len(c) for c in chunks)


def _stream_payload(f, chunks, parent=0):
    """Write the file of an iterator of chunks to ``f``: a placeholder header, the
    chunks (length and CRC computed on the way), then the real header over the
    placeholder. Returns the payload's length."""
    p = _PARENT.pack(parent) if parent else b""
    start = f.tell()
    f.write(bytes(_HEADER.size + len(p)))
    length, crc = 0, zlib.crc32(p) if p else 0
    for c in chunks:
        f.write(c)
        length += len(c)
        crc = zlib.crc32(c, crc)
    end = f.tell()
    f.seek(start)
    f.write(_HEADER.pack(MAGIC, CHAIN_VERSION if parent else FILE_VERSION, length, crc) + p)
    f.seek(end)
    return length


def encode_file(data, parent=0):
    """``data`` (bytes, or a list of byte chunks) with the integrity header in front;
    ``parent``: the checkpoint a delta applies to (0: a base)."""
    chunks = _chunks(data)
    return b"".join([file_header(chunks, parent), *chunks])


def _parse_header(head, path):
    """``(version, length, crc, parent, header size)`` of a file starting with ``head``."""
    if len(head) < HEADER_SIZE:
        raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: {len(head)} bytes, shorter than "
                                f"its {HEADER_SIZE}-byte header")
    magic, version, length, crc = _HEADER.unpack_from(head)
    if magic != MAGIC:
        raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: it does not start with {MAGIC!r}")
    if version == FILE_VERSION:
        return version, length, crc, 0, HEADER_SIZE
    if version != CHAIN_VERSION:
        raise CheckpointCorrupt(f"checkpoint file {path}: format version {version} is not supported "
                                f"(this Bittern reads versions {FILE_VERSION}..{CHAIN_VERSION})")
    if len(head) < HEADER2_SIZE:
        raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: {len(head)} bytes, shorter than "
                                f"its {HEADER2_SIZE}-byte header")
    (parent,) = _PARENT.unpack_from(head, HEADER_SIZE)
    return version, length, crc, parent, HEADER2_SIZE


def unpack_file(blob, path="<bytes>"):
    """``(parent, payload)`` of a checkpoint file, after checking its header (parent 0:
    a base); raises :class:`CheckpointCorrupt` naming ``path``."""
    version, length, crc, parent, size = _parse_header(blob, path)
    payload = memoryview(blob)[size:]
    _verify(blob[HEADER_SIZE:size], payload, length, crc, path)
    return parent, bytes(payload)


def _verify(parent_bytes, payload, length, crc, path):
    if len(payload) != length:
        raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: the header says {length} bytes of "
                                f"state, the file holds {len(payload)}")
    got = zlib.crc32(payload, zlib.crc32(parent_bytes) if parent_bytes else 0)
    if got != crc:
        raise CheckpointCorrupt(f"checkpoint file {path} is corrupt: CRC-32 mismatch "
                                f"(header {crc:#010x}, contents {got:#010x})")


def decode_file(blob, path="<bytes>"):
    """The payload of a checkpoint file, after checking its header; raises
    :class:`CheckpointCorrupt` naming ``path``. (A delta's payload is a delta: see
    :meth:`CheckpointStore.load` for the full state.)"""
    return unpack_file(blob, path)[1]


def read_file(path):
    """``(parent, payload)`` of the checkpoint file at ``path``, verified. The header and
    the payload are read separately, so the payload is never copied (a copy of a large
    state would hold the GIL; reads and the CRC of a large buffer release it). Unbuffered:
    a buffered reader joins what it buffered with the rest, a copy of the whole file."""
    with open(path, "rb", buffering=0) as f:
        head = f.read(HEADER_SIZE)
        if len(head) == HEADER_SIZE and head[4] == CHAIN_VERSION:
            head += f.read(_PARENT.size)
        version, length, crc, parent, size = _parse_header(head, path)
        payload = f.read()
    _verify(head[HEADER_SIZE:size], payload, length, crc, path)
    return parent, payload


def read_parent(path):
    """The parent checkpoint id in the header of the file at ``path`` (0: a base),
    reading only the header."""
    with open(path, "rb") as f:
        head = f.read(HEADER2_SIZE)
    return _parse_header(head, path)[3]


def fsync_path(path):
    """fsync a file (its bytes made durable) or a directory (its entries: a rename or a new
    file in it made durable); an error is raised, not swallowed."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path  # (the name its callers use for directories)


def _makedirs_durable(path):
    """``os.makedirs`` that also fsyncs the parent of every directory it creates,
    so the new directory entries survive a crash with the file written inside."""
    path = os.path.abspath(path)
    missing = []
    p = path
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            continue
        fsync_dir(os.path.dirname(d))
