"""Spark batch sources as streams: ``SparkSpout`` (extra ``bittern[spark]``: pyspark 4,
Java 17). See :mod:`bittern.spark.spout`; the type mapping is :mod:`bittern.spark.typemap`.
Importing this package does not import pyspark (the CLI checks sources without it)."""
from .source import SparkSourceError
from .spout import SparkSpout

__all__ = ["SparkSpout", "SparkSourceError"]
