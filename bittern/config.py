"""Configuration: packaged defaults, layered overrides, and validation.

Every known key and its default lives in ``defaults.toml``. Values given by a
topology, a component or the command line are checked against the type of the
default; unknown keys in Bittern's namespaces are reported (a typo must not be
silently ignored), other keys pass through untouched for user code.
"""
from __future__ import annotations

import difflib
import json
import logging
import os
import tomllib

from .errors import ConfigError

_DEFAULTS_PATH = os.path.join(os.path.dirname(__file__), "defaults.toml")
RESERVED_PREFIXES = ("topology.", "bittern.")
ALIASES = {"topology.workers": "topology.stmgrs"}
CHOICES = {
    "topology.reliability.mode": ("ATMOST_ONCE", "ATLEAST_ONCE", "EFFECTIVELY_ONCE"),
    "topology.serializer": ("msgpack", "pickle"),
    "topology.fields.grouping.hash": ("crc32", "storm"),
}
POSITIVE = {"topology.stmgrs", "topology.producer.batch.size"}
# keys whose value may take several shapes (a string or a list): not type-checked here
ANY_SHAPE = {"spout.files", "spout.spark.path", "spout.spark.options", "spout.spark.conf"}

ATMOST_ONCE, ATLEAST_ONCE, EFFECTIVELY_ONCE = CHOICES["topology.reliability.mode"]

log = logging.getLogger("bittern.config")


def _acker_executors(val):
    if val is None:  # Storm's default: one acker per worker, so acking is on
        return ATLEAST_ONCE
    if isinstance(val, bool) or not isinstance(val, int) or val < 0:
        raise ValueError("a whole number >= 0")
    return ATLEAST_ONCE if val else ATMOST_ONCE


def _tick_ms(val):
    if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0:
        raise ValueError("a number >= 0")
    return val / 1000.0


def _multilang_serializer(val):
    """Storm names the multilang serializer by its Java class (JsonSerializer, or a
    msgpack one such as pystorm's); Bittern by ``json`` / ``msgpack``."""
    low = str(val).lower()
    return "msgpack" if "msgpack" in low or "messagepack" in low else "json" if "json" in low else val


# Storm's and Heron's keys that Bittern spells otherwise: key -> (Bittern's key, convert).
# An explicit Bittern key in the same layer wins.
TRANSLATED = {
    "topology.acker.executors": ("topology.reliability.mode", _acker_executors),  # Storm: 0 turns acking off
    "topology.tick.tuple.freq.ms": ("topology.tick.tuple.freq.secs", _tick_ms),  # Heron (Java API)
}
# Storm's and Heron's keys with no meaning here: accepted quietly, so that a topology
# written for them runs unchanged (JVM options, Kryo, resource hints, team labels).
FOREIGN_PREFIXES = ("topology.kryo.", "topology.container.", "topology.trident.", "topology.worker.",
                    "topology.acker.", "topology.eventlogger.", "topology.executor.", "topology.transfer.",
                    "topology.component.", "topology.team.", "topology.spout.wait.", "topology.sleep.spout.",
                    "topology.backpressure.", "topology.disruptor.", "topology.state.", "topology.testing.")
FOREIGN_KEYS = {"topology.name", "topology.cap.ticket", "topology.project.name",
                "topology.additional.classpath", "topology.auto.task.hooks", "topology.serializer.classname",
                "topology.skip.missing.kryo.registrations", "topology.fall.back.on.java.serialization",
                "topology.stats.sample.rate", "topology.builtin.metrics.bucket.size.secs",
                "topology.environment", "topology.stateful.start.clean", "topology.classpath",
                "topology.users", "topology.groups", "topology.submitter.principal", "topology.priority",
                "topology.scheduler.strategy", "topology.bolts.outgoing.overflow.buffer.enable",
                "topology.python.version", "topology.shellbolt.max.pending.timeout.secs"}
NORMALISE = {"topology.multilang.serializer": _multilang_serializer}

_defaults_cache = None


def defaults():
    """A fresh copy of the packaged defaults."""
    global _defaults_cache
    if _defaults_cache is None:
        with open(_DEFAULTS_PATH, "rb") as f:
            _defaults_cache = tomllib.load(f)
    return dict(_defaults_cache)


def parse_value(text):
    """``--config k=v`` values: JSON when it parses (numbers, true/false, lists), else a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_overrides(items):
    out = {}
    for item in items or ():
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config {item!r}: expected key=value")
        out[key.strip()] = parse_value(val.strip())
    return out


def check(conf, where="config"):
    """Validate and normalise ``conf`` (a dict of overrides).

    Returns ``(normalised, warnings)``; raises :class:`ConfigError` on a bad value.
    """
    known = defaults()
    out, warnings = {}, []
    for key, val in conf.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: config keys must be strings, got {key!r}")
        key = ALIASES.get(key, key)
        if key in TRANSLATED:
            target, convert = TRANSLATED[key]
            try:
                new = convert(val)
            except ValueError as e:
                raise ConfigError(f"{where}: {key} must be {e}, got {val!r}") from None
            if target not in conf:
                out[target] = _check_value(target, new, known[target], where)
                log.debug("%s: %s = %r taken as %s = %r", where, key, val, target, new)
        elif key in known:
            out[key] = _check_value(key, NORMALISE[key](val) if key in NORMALISE else val, known[key], where)
        elif key in FOREIGN_KEYS or key.startswith(FOREIGN_PREFIXES):
            log.debug("%s: %s is a Storm/Heron key with no meaning in Bittern; kept, not used", where, key)
            out[key] = val
        else:
            if key.startswith(RESERVED_PREFIXES):
                hint = difflib.get_close_matches(key, known, n=1)
                warnings.append(f"{where}: unknown config key {key!r}"
                                + (f" (did you mean {hint[0]!r}?)" if hint else ""))
            out[key] = val
    return out, warnings


def _check_value(key, val, default, where):
    if key in ANY_SHAPE:
        return val
    if isinstance(default, bool):
        if not isinstance(val, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {val!r}")
    elif isinstance(default, (int, float)):
        if isinstance(val, bool) or not isinstance(val, (int, float)):
            raise ConfigError(f"{where}: {key} must be a number, got {val!r}")
        if isinstance(default, int) and not isinstance(default, bool) and isinstance(val, float):
            if not val.is_integer():
                raise ConfigError(f"{where}: {key} must be a whole number, got {val!r}")
            val = int(val)
        if val < 0 or (key in POSITIVE and val < 1):
            raise ConfigError(f"{where}: {key} must be {'>= 1' if key in POSITIVE else '>= 0'}, got {val!r}")
    elif isinstance(default, str):
        if not isinstance(val, str):
            raise ConfigError(f"{where}: {key} must be a string, got {val!r}")
        if key in CHOICES:
            norm = val.upper() if key == "topology.reliability.mode" else val.lower()
            if norm not in CHOICES[key]:
                raise ConfigError(f"{where}: {key} must be one of {', '.join(CHOICES[key])}, got {val!r}")
            val = norm
    return val


def check_merged(conf, where):
    """Checks of keys that only make sense together, on a merged config."""
    if conf.get("topology.fields.grouping.hash") == "storm" \
            and conf.get("topology.reliability.mode") == EFFECTIVELY_ONCE:
        raise ConfigError(f"{where}: topology.fields.grouping.hash = storm cannot be used with "
                          "EFFECTIVELY_ONCE (fields grouping must route by the key groups of keyed state)")
    return conf


def merge(*layers):
    """Defaults overlaid by each layer in turn."""
    out = defaults()
    for layer in layers:
        if layer:
            out.update(layer)
    return out
