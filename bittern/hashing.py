"""Stable hashing of tuple values (never Python's salted ``hash()``).

Fields grouping and keyed state must place a key on the same task in every
process and after every restart, so the hash depends only on the key's bytes:
CRC-32 of its msgpack encoding (strings hash their UTF-8 bytes directly).
"""
from __future__ import annotations

import struct
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


# -- Storm's placement: Java hashCode of the values ------------------------------------------
# Storm 2 sends a fields-grouped tuple to targetTasks[floorMod(Arrays.deepHashCode(keys), n)]
# (TupleUtils.chooseTaskIndex), the target tasks in ascending id order. The values are
# hashed as the Java objects a multilang component's JSON becomes in Storm (json-simple):
# str -> String, int -> Long, float -> Double, bool -> Boolean, None -> null, list ->
# ArrayList, dict -> HashMap; bytes hash as a byte[] element of deepHashCode does.
_MASK32, _MASK64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def _int32(h):
    h &= _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def _java_long(v):
    u = v & _MASK64
    return _int32(u ^ (u >> 32))


def java_hash(value):
    """``value.hashCode()`` of the Java object Storm would hold for ``value`` (a signed
    32-bit int)."""
    t = type(value)
    if t is str:
        h = 0
        data = value.encode("utf-16-le", "surrogatepass")
        for i in range(0, len(data), 2):  # UTF-16 code units, as Java strings are
            h = (31 * h + (data[i] | data[i + 1] << 8)) & _MASK32
        return _int32(h)
    if t is bool:
        return 1231 if value else 1237
    if t is int:
        return _java_long(value)
    if t is float:
        if value != value:  # NaN: doubleToLongBits' canonical NaN
            bits = 0x7FF8000000000000
        else:
            bits = struct.unpack("<Q", struct.pack("<d", value))[0]
        return _java_long(bits)
    if value is None:
        return 0
    if t in (list, tuple):
        return _list_hash(value)
    if t is dict:
        return _int32(sum(java_hash(k) ^ java_hash(v) for k, v in value.items()))
    if t in (bytes, bytearray):
        h = 1
        for b in value:
            h = (31 * h + (b - 256 if b > 127 else b)) & _MASK32
        return _int32(h)
    raise TypeError(f"no Java hashCode for a value of type {t.__name__} (Storm placement hashes "
                    "str, int, float, bool, None, list, dict and bytes)")


def _list_hash(values):
    h = 1
    for v in values:
        h = (31 * h + java_hash(v)) & _MASK32
    return _int32(h)


def storm_task_index(keys, n):
    """The index among ``n`` sorted target tasks Storm picks for the grouping ``keys``
    (the list of the grouped fields' values)."""
    return _list_hash(keys) % n  # Python's % of a negative int is Java's floorMod
