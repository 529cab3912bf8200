"""Stable hashing of tuple values (never Python's salted ``hash()``).

Fields grouping and keyed state must place a key on the same task in every
process and after every restart, so the hash depends only on the key's bytes:
CRC-32 of its msgpack encoding (strings hash their UTF-8 bytes directly).
"""
from __future__ import annotations

import zlib

import msgpack

_packb = msgpack.Packer(use_bin_type=True).pack


def key_bytes(key):
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return key
    return _packb(list(key) if isinstance(key, tuple) else key)


def stable_hash(key, seed=0):
    """A 32-bit hash of ``key`` (a value or a tuple of values) that never changes."""
    return zlib.crc32(key_bytes(key), seed)
