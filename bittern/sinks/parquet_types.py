"""ParquetSink's pure parts: type names, the column type a first value gives, the check
(and conversion) of each later value, Hive partition names, and the writability probe
(:mod:`bittern.sinks.parquet`). pyarrow is imported when first needed, so importing
``bittern.sinks`` does not need it.
"""
from __future__ import annotations

import datetime as _dt
import os
import tempfile

from ..errors import SchemaError
from .base import SinkError

__all__ = ["HIVE_NULL", "ParquetSchemaError", "TYPE_NAMES", "arrow_type", "check_writable", "converter",
           "fast_types", "hive_escape", "infer_type", "load_pyarrow"]

# type name -> pyarrow factory name (and arguments)
TYPE_NAMES = {
    "string": ("string",), "str": ("string",), "utf8": ("string",),
    "binary": ("binary",), "bytes": ("binary",),
    "bool": ("bool_",), "boolean": ("bool_",),
    "int8": ("int8",), "tinyint": ("int8",), "byte": ("int8",),
    "int16": ("int16",), "smallint": ("int16",), "short": ("int16",),
    "int32": ("int32",), "int": ("int32",), "integer": ("int32",),
    "int64": ("int64",), "bigint": ("int64",), "long": ("int64",),
    "float32": ("float32",), "float": ("float32",),
    "float64": ("float64",), "double": ("float64",),
    "date": ("date32",), "date32": ("date32",),
    "timestamp": ("timestamp", "us", "UTC"),          # an instant, stored in UTC
    "timestamp_ntz": ("timestamp", "us"),             # a wall-clock time, no zone
}
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_HIVE_ESCAPE = set('"#%\'*/:=?\\\x7f{[]^')
_UTC = _dt.timezone.utc


class ParquetSchemaError(SinkError, SchemaError):
    """A value does not fit its column (or the declared schema does not fit the stream)."""


def load_pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SinkError("ParquetSink needs pyarrow: pip install 'bittern[parquet]'") from None
    return pa, pq


def arrow_type(spec, where):
    """A pyarrow type from a type name of :data:`TYPE_NAMES` (or a pyarrow type)."""
    pa, _ = load_pyarrow()
    if isinstance(spec, pa.DataType):
        return spec
    key = str(spec).strip().lower()
    if key not in TYPE_NAMES:
        raise ParquetSchemaError(f"{where}: unknown type {spec!r} (types: {', '.join(sorted(set(TYPE_NAMES)))})")
    name, *args = TYPE_NAMES[key]
    return getattr(pa, name)(*args)


def infer_type(value):
    """The column type a first non-null ``value`` gives."""
    pa, _ = load_pyarrow()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, (bytes, bytearray)):
        return pa.binary()
    return pa.array([value]).type  # lists, dicts (structs), dates...


def _int_conv(bits):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def conv(v):
        if type(v) is int or (isinstance(v, int) and not isinstance(v, bool)):
            if lo <= v <= hi:
                return v
            raise ValueError(f"{v} is out of the int{bits} range")
        raise TypeError
    return conv


def _float_conv(v):
    if isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool)):
        return float(v)
    raise TypeError


def _instance_conv(*types):
    def conv(v):
        if isinstance(v, types):
            return v
        raise TypeError
    return conv


def _date_conv(v):
    if isinstance(v, str):
        return _dt.date.fromisoformat(v)
    if isinstance(v, _dt.date) and not isinstance(v, _dt.datetime):
        return v
    raise TypeError


def _timestamp_conv(aware):
    def conv(v):
        if isinstance(v, str):
            v = _dt.datetime.fromisoformat(v)
        elif not isinstance(v, _dt.datetime):
            raise TypeError
        if aware:
            return v.replace(tzinfo=_UTC) if v.tzinfo is None else v.astimezone(_UTC)
        if v.tzinfo is not None:
            raise ValueError("a timestamp_ntz column takes times without a zone")
        return v
    return conv


def fast_types(t):
    """Python types whose values go into a column of type ``t`` as they are, unchecked (an
    int64 out of range is caught when the row group is built); others go through
    :func:`converter`."""
    pa, _ = load_pyarrow()
    if pa.types.is_boolean(t):
        return frozenset((bool,))
    if pa.types.is_int64(t):
        return frozenset((int,))
    if pa.types.is_float64(t):
        return frozenset((float,))
    if pa.types.is_string(t):
        return frozenset((str,))
    if pa.types.is_binary(t):
        return frozenset((bytes,))
    return frozenset()


def converter(t):
    """``conv(value) -> value`` for a non-null value of pyarrow type ``t``: raises TypeError
    or ValueError when it does not fit. Nested types are checked by pyarrow when their
    row group is built."""
    pa, _ = load_pyarrow()
    if pa.types.is_boolean(t):
        return _instance_conv(bool)
    if pa.types.is_integer(t):
        return _int_conv(t.bit_width)
    if pa.types.is_floating(t):
        return _float_conv
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _instance_conv(str)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _instance_conv(bytes, bytearray)
    if pa.types.is_date(t):
        return _date_conv
    if pa.types.is_timestamp(t):
        return _timestamp_conv(t.tz is not None)
    return lambda v: v


def hive_escape(value):
    """A partition value as a directory-name part, escaped as Hive (and Spark) do."""
    if value is None:
        return HIVE_NULL
    s = str(value).lower() if isinstance(value, bool) else str(value)
    if s == "":
        return HIVE_NULL
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPE or ord(c) < 0x20 else c for c in s)


def check_writable(directory, what="ParquetSink"):
    """Raise ``SinkError`` naming ``directory`` unless files can be created in it (or, if it
    does not exist yet, in its nearest existing ancestor). Tries for real (root ignores
    permission bits; read-only mounts and files in the way do not)."""
    path = os.path.abspath(os.fspath(directory))
    probe_in = path
    while not os.path.exists(probe_in):
        parent = os.path.dirname(probe_in)
        if parent == probe_in:
            break
        probe_in = parent
    if not os.path.isdir(probe_in):
        raise SinkError(f"{what}: output directory {path} cannot be created: {probe_in} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bittern-probe-", dir=probe_in))
    except OSError as e:
        raise SinkError(f"{what}: output directory {path} is not writable ({e.strerror or e})") from None
