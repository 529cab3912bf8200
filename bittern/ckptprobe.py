"""Store probes (cluster mode): proof, at every start of an exactly-once topology, that
every container and nimbus can write the shared checkpoint store (bittern/checkpoint.py)
and that the topology master reads what they wrote. Each writer puts a fresh nonce in
``<root>/<topology>/_probe/<who>`` the way a state file is written (temp file, fsync,
rename, fsync of the directory) and reports it; the reader checks the file holds it.
"""
from __future__ import annotations

import json
import os
import secrets
import tempfile

from .ckptfile import _makedirs_durable, fsync_dir

PROBE_DIR = "_probe"  # under <root>/<topology>/: not a checkpoint id, so prune never looks there


def probe_path(root, topology, who):
    """Where probe ``who`` (``nimbus``, ``c<container>``) of ``topology`` lives."""
    return os.path.join(os.path.abspath(root), topology, PROBE_DIR, who)


def write_probe(root, topology, who, by=""):
    """Write probe ``who`` holding a fresh nonce (and ``by``, who wrote it), the way a
    state file is written: temp file, fsync, rename, fsync of the directory. Returns
    ``{"path", "nonce"}``, or ``{"path", "error"}`` (one line) when it cannot."""
    path = probe_path(root, topology, who)
    d = os.path.dirname(path)
    nonce = secrets.token_hex(8)
    tmp = None
    try:
        _makedirs_durable(d)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".tmp-{who}-")
        with os.fdopen(fd, "w") as f:
            json.dump({"nonce": nonce, "by": by}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        fsync_dir(d)
    except OSError as e:
        return {"path": path, "error": _os_error(e, d)}
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return {"path": path, "nonce": nonce}


def check_probe(path, nonce):
    """None when the probe file at ``path`` holds ``nonce``; else why not, in a few words."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(4096))
    except FileNotFoundError:
        return "no such file"
    except OSError as e:
        return _os_error(e, os.path.dirname(path))
    except ValueError:
        return "it is not a probe file"
    if not isinstance(doc, dict) or not nonce or doc.get("nonce") != nonce:
        by = doc.get("by") if isinstance(doc, dict) else None
        return f"it holds another probe ({by or 'writer unknown'}), not the one just written"
    return None


def probe_problem(root, topology, who, probe, writer, reader):
    """Why ``probe`` (what ``writer``, e.g. "container 1 (on h2)", reported of its
    :func:`write_probe` of probe ``who``) shows that it cannot write the store at ``root``, or
    that ``reader`` cannot read what it wrote: one line naming the writer and the path; None
    when the probe is fine."""
    if not isinstance(probe, dict):
        return f"{writer} sent no probe of the checkpoint store {root}"
    if probe.get("error"):
        return (f"{writer} cannot write the checkpoint store: {probe.get('path') or root}: {probe['error']} "
                f"(bittern.checkpoint.dir must be writable on every host)")
    path = probe_path(root, topology, who)
    why = check_probe(path, probe.get("nonce"))
    if why:
        return (f"{reader} cannot read {path}, which {writer} wrote: {why} (bittern.checkpoint.dir must be "
                f"one directory every host and nimbus share)")
    return None


def _os_error(e, d):
    """An OSError in a few words; its file named unless it is in directory ``d``."""
    name = e.filename if isinstance(e.filename, str) else None
    where = f" ({name})" if name and os.path.dirname(os.path.abspath(name)) != os.path.abspath(d) else ""
    return f"{e.strerror or type(e).__name__}{where}"
