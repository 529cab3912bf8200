"""The token that guards nimbus's HTTP API in cluster mode.

Nimbus creates one random token at its first start and keeps it in
``<data_dir>/token`` (mode 0600); every request must carry
``Authorization: Bearer <token>``. One shared secret is enough here: whoever may
submit topologies may run arbitrary code on the cluster anyway, so finer roles
would add configuration without adding safety. Give the token to clients by
copying the file or through the environment.

Where a client finds its token (:func:`client_token`), first match wins:

1. the ``BITTERN_TOKEN`` environment variable;
2. ``token_file`` in the cluster config, a TOML file at ``$BITTERN_CLUSTER_CONFIG``,
   else ``$BITTERN_HOME/cluster.toml``, else ``~/.bittern/cluster.toml``::

       nimbus = "http://nimbus.example:7080"
       token_file = "nimbus.token"   # relative to the config file's directory; ~ expands

The token never goes in the config itself, so the config can be shared or
checked in while the token file stays private.
"""
from __future__ import annotations

import hmac
import os
import secrets
import stat
import tempfile
import tomllib

from .errors import BitternError, ConfigError

TOKEN_FILE = "token"
ENV_TOKEN = "BITTERN_TOKEN"
ENV_CONFIG = "BITTERN_CLUSTER_CONFIG"


class AuthError(BitternError):
    """The API token cannot be created or read."""


def load_or_create_token(data_dir):
    """Nimbus's token: read ``<data_dir>/token``, or create it (0600, atomically).

    Creation writes a private temporary file and hard-links it into place, which
    fails if the file appeared meanwhile: two nimbus processes starting together on
    one data dir end up with the same token, and a reader never sees a partial file.
    """
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    path = os.path.join(data_dir, TOKEN_FILE)
    if os.path.lexists(path):
        return _read_private(path)
    token = secrets.token_urlsafe(32)
    fd, tmp = tempfile.mkstemp(prefix=".token.", dir=data_dir)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return _read_private(path)  # another process won the race: use its token
        except OSError:
            os.replace(tmp, path)  # a filesystem without hard links
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    dfd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return token


def _read_private(path):
    """The token in ``path``, refusing a file others may read (as ssh does with keys)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise AuthError(f"cannot read the token file {path!r}: {e.strerror}") from None
    with os.fdopen(fd) as f:
        mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
        if mode & 0o077:
            raise AuthError(f"token file {path!r} is accessible by others (mode {mode:04o}); "
                            f"run: chmod 600 {path}")
        token = f.read().strip()
    if not token:
        raise AuthError(f"token file {path!r} is empty; delete it and restart nimbus to make a new one")
    return token


def check(header_value, token):
    """True when ``header_value`` (an ``Authorization`` header, or None) is
    ``Bearer <token>``. The token comparison is constant-time; an empty server token
    admits nobody."""
    if isinstance(header_value, bytes):
        header_value = header_value.decode("latin-1")
    scheme, _, presented = (header_value or "").strip().partition(" ")
    same = hmac.compare_digest(presented.strip().encode("utf-8"), (token or "").encode("utf-8"))
    return bool(token) and scheme.lower() == "bearer" and same


def bearer(token):
    """The ``Authorization`` header value a client sends."""
    return f"Bearer {token}"


def cluster_config_path(env=None):
    env = os.environ if env is None else env
    if env.get(ENV_CONFIG):
        return os.path.abspath(os.path.expanduser(env[ENV_CONFIG]))
    home = env.get("BITTERN_HOME") or "~/.bittern"
    return os.path.abspath(os.path.join(os.path.expanduser(home), "cluster.toml"))


def read_cluster_config(path):
    """The cluster config at ``path`` as a dict ({} when the file does not exist)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cluster config {path!r}: {e}") from None


def client_token(config=None, env=None):
    """The token a client sends to nimbus (see the module docstring for where it looks).

    ``config`` is an already-read cluster config dict (a relative ``token_file`` is
    then taken from the current directory); None reads the config file. ``env``
    defaults to ``os.environ``. Raises :class:`ConfigError` when no token is found.
    """
    env = os.environ if env is None else env
    if env.get(ENV_TOKEN, "").strip():
        return env[ENV_TOKEN].strip()
    base = os.getcwd()
    if config is None:
        path = cluster_config_path(env)
        config, base = read_cluster_config(path), os.path.dirname(path)
    token_file = config.get("token_file")
    if not token_file:
        raise ConfigError(f"no nimbus API token: set {ENV_TOKEN}, or token_file in "
                          f"{cluster_config_path(env)}")
    path = os.path.join(base, os.path.expanduser(str(token_file)))
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ConfigError(f"cannot read the nimbus token file {path!r}: {e.strerror}") from None
    if not token:
        raise ConfigError(f"the nimbus token file {path!r} is empty")
    return token
