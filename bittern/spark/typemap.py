"""Spark values to msgpack-able Python values, one converter per column, built from
the DataFrame's schema (so a TIMESTAMP and a TIMESTAMP_NTZ, both a naive
``datetime`` once PySpark has converted them, still come out differently).

========================  ==================================================  =====================
Spark type                emitted as                                          example
========================  ==================================================  =====================
NULL (any type)           ``None``                                            ``None``
BOOLEAN                   ``bool``                                            ``True``
TINYINT .. BIGINT         ``int``                                             ``42``
FLOAT, DOUBLE             ``float`` (NaN and infinities kept)                 ``1.5``
STRING, CHAR, VARCHAR     ``str``                                             ``"fox"``
BINARY                    ``bytes``                                           ``b"\\x00\\x01"``
DECIMAL(p, s)             ``str``, exact, with its scale                      ``"12.340"``
DATE                      ``str``, ISO 8601                                   ``"2024-02-29"``
TIMESTAMP                 ``str``, ISO 8601 in UTC with ``+00:00``            ``"2024-02-29T13:45:00.000001+00:00"``
TIMESTAMP_NTZ             ``str``, ISO 8601 without offset                    ``"2024-02-29T13:45:00"``
INTERVAL DAY TO SECOND    ``int``, microseconds                               ``90000000``
ARRAY<T>                  ``list`` of T's values                              ``[1, None, 3]``
MAP<K, V>                 ``dict``; keys converted, a struct key as its        ``{"a": 1}``
                          JSON text (msgpack decoders reject container keys)
STRUCT<...>               ``dict`` {field name: value}                        ``{"x": 1, "y": "b"}``
anything else             ``str(value)``                                      (VARIANT, user types)
========================  ==================================================  =====================

(PySpark itself cannot turn a map with array keys or a YEAR TO MONTH interval
into Python values: such columns fail in PySpark; cast them first.) Decimals become strings because a float would round them and msgpack has no
decimal type; ``decimal.Decimal(value)`` gives the exact number back. Timestamps
become strings for the same reason (msgpack's timestamp extension is not decoded
by every consumer); ``datetime.fromisoformat(value)`` reads them back. TIMESTAMP
values are instants: PySpark hands them over as naive datetimes in the Python
process's local time zone, which :func:`converter` turns into UTC, so the value
does not depend on the machine's time zone.
"""
from __future__ import annotations

import datetime as _dt
import json

__all__ = ["converter", "row_converter"]

_UTC = _dt.timezone.utc


def _identity(v):
    return v


def _decimal(v):
    return None if v is None else str(v)


def _date(v):
    return None if v is None else v.isoformat()


def _timestamp(v):
    if v is None:
        return None
    if v.tzinfo is None:  # PySpark: local wall-clock time of this process
        v = v.astimezone(_UTC)
    return v.astimezone(_UTC).isoformat()


def _timestamp_ntz(v):
    return None if v is None else v.replace(tzinfo=None).isoformat()


def _binary(v):
    return None if v is None else bytes(v)


def _interval_dt(v):
    if v is None:
        return None
    if isinstance(v, _dt.timedelta):
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    return int(v)


def _other(v):
    return None if v is None else str(v)


def _key(v):
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)
    return v


def converter(dtype):
    """The function that turns one value of Spark type ``dtype`` (a
    ``pyspark.sql.types.DataType``) into its emitted value (table above). Plain
    types get the identity function, which :func:`row_converter` skips."""
    from pyspark.sql import types as T

    if isinstance(dtype, (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType,
                          T.FloatType, T.DoubleType, T.StringType, T.NullType)):
        return _identity
    if isinstance(dtype, (getattr(T, "CharType", ()), getattr(T, "VarcharType", ()))):
        return _identity
    if isinstance(dtype, T.DecimalType):
        return _decimal
    if isinstance(dtype, T.DateType):
        return _date
    if isinstance(dtype, T.TimestampNTZType):
        return _timestamp_ntz
    if isinstance(dtype, T.TimestampType):
        return _timestamp
    if isinstance(dtype, T.BinaryType):
        return _binary
    if isinstance(dtype, T.DayTimeIntervalType):
        return _interval_dt
    if isinstance(dtype, T.ArrayType):
        inner = converter(dtype.elementType)
        if inner is _identity:
            return lambda v: None if v is None else list(v)
        return lambda v: None if v is None else [inner(x) for x in v]
    if isinstance(dtype, T.MapType):
        kc, vc = converter(dtype.keyType), converter(dtype.valueType)
        return lambda v: None if v is None else {_key(kc(k)): vc(x) for k, x in v.items()}
    if isinstance(dtype, T.StructType):
        names = [f.name for f in dtype.fields]
        convs = [converter(f.dataType) for f in dtype.fields]
        return lambda v: None if v is None else {n: c(x) for n, c, x in zip(names, convs, v)}
    return _other


def row_converter(schema):
    """A function from a PySpark ``Row`` of ``schema`` (a ``StructType``) to the list
    of emitted values, in the schema's column order."""
    convs = [converter(f.dataType) for f in schema.fields]
    special = [(i, c) for i, c in enumerate(convs) if c is not _identity]
    if not special:
        return list

    def convert(row):
        out = list(row)
        for i, c in special:
            out[i] = c(out[i])
        return out
    return convert
