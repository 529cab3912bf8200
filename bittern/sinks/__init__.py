"""Exactly-once output: transactional (two-phase commit) sinks and Trident's txid rules.

``TransactionalSink`` is the driver the runtime calls (its module docstring,
``bittern.sinks.base``, is the call-order contract); ``SinkBolt`` puts one in a
topology; ``FileSink``, ``SqliteSink`` and ``ParquetSink`` (``ParquetSinkBolt``; needs
pyarrow, imported when one is opened) are working sinks; ``TxidValue`` and
``OpaqueValue`` make updates of a store without transactions idempotent.
"""
from .base import Inventory, RecoveryReport, SinkBolt, SinkError, TransactionalSink
from .files import FileSink
from .idempotent import Applied, DictStore, EncodedStore, OpaqueValue, TxidOrderError, TxidValue
from .parquet import ParquetSchemaError, ParquetSink, ParquetSinkBolt
from .sqlite import SqliteSink

__all__ = ["Applied", "DictStore", "EncodedStore", "FileSink", "Inventory", "OpaqueValue", "ParquetSchemaError",
           "ParquetSink", "ParquetSinkBolt", "RecoveryReport",
           "SinkBolt", "SinkError", "SqliteSink", "TransactionalSink", "TxidOrderError", "TxidValue"]
