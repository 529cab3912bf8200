"""Errors the user sees. Each carries a one-line message that names the thing."""


class BitternError(Exception):
    """Base of every error Bittern reports to a user."""


class TopologyError(BitternError):
    """A topology definition is invalid (names the file, component, stream or field)."""


class ConfigError(BitternError):
    """A configuration key or value is invalid."""


class SchemaError(BitternError):
    """An emitted tuple does not match the declared output fields of its stream."""


class StateError(BitternError):
    """The state manager refused an operation (e.g. the name is already in use)."""
