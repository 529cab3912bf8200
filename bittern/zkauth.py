"""ZooKeeper credentials of the cluster daemons, and the loud way to go without.

Whoever can write Bittern's ZooKeeper tree runs code on every supervisor (a topology
record names a code archive), and whoever can read it reads the API token. So the
cluster daemons (nimbus, supervisor) refuse to start without ZooKeeper digest
credentials unless given ``--insecure``, and then they say what that opens.

Credentials are ``user:password``, from (first found):

1. ``--zk-auth-file FILE``: a file holding ``user:password`` (one line), private to
   this user (mode 0600, as ssh wants of its keys);
2. ``$BITTERN_ZK_AUTH_FILE``: the same, named in the environment;
3. ``$BITTERN_ZK_AUTH``: the credentials themselves.

Never on the command line: ``/proc/PID/cmdline`` is readable by every local user.
Once read, both variables are removed from this process's environment, so no child
(user code in an instance above all) inherits them; the supervisor hands them to the
one child that needs ZooKeeper, the topology master, through :data:`ENV_AUTH` in that
process's environment alone.
"""
from __future__ import annotations

import os
import stat
import sys

from .errors import ConfigError

ENV_AUTH = "BITTERN_ZK_AUTH"
ENV_AUTH_FILE = "BITTERN_ZK_AUTH_FILE"

INSECURE_WARNING = (
    "WARNING: --insecure: ZooKeeper is used WITHOUT authentication. Anyone who can reach "
    "ZooKeeper can read the nimbus API token and every topology's plan, write a topology "
    "record that makes every supervisor run their code, and steer or stop any topology. "
    "Use it only on a ZooKeeper no one else can reach; give --zk-auth-file to be safe.")


def add_arguments(group):
    group.add_argument("--zk-auth-file", metavar="FILE", default=None,
                       help=f"ZooKeeper digest credentials: a file (mode 0600) holding user:password "
                            f"(default: ${ENV_AUTH_FILE}, else ${ENV_AUTH})")
    group.add_argument("--zk-auth", metavar="USER:PASSWORD", default=None,
                       help="refused: a password in argv is readable by every local user; use --zk-auth-file")
    group.add_argument("--insecure", action="store_true",
                       help="run without ZooKeeper authentication (anyone who reaches ZooKeeper then "
                            "controls the cluster)")


def _check(auth, where):
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ConfigError(f"ZooKeeper credentials in {where} must be user:password")
    return auth


def read_auth_file(path):
    """The ``user:password`` in ``path``, refusing a file others may read or one that is
    not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise ConfigError(f"cannot read the ZooKeeper credentials file {path!r}: {e.strerror}") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"ZooKeeper credentials file {path!r} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise ConfigError(f"ZooKeeper credentials file {path!r} is accessible by others "
                              f"(mode {mode:04o}); run: chmod 600 {path}")
        return _check(f.read().strip(), path)


def resolve(args, env=None):
    """The credentials the daemon uses (None with ``--insecure`` and none given).
    Raises :class:`ConfigError` with one line for the user; removes the variables
    from ``env`` (``os.environ``) either way."""
    env = os.environ if env is None else env
    from_env, env_file = env.pop(ENV_AUTH, None), env.pop(ENV_AUTH_FILE, None)
    if args.zk_auth is not None:
        raise ConfigError("--zk-auth puts the ZooKeeper password on the command line, where every local "
                          f"user can read it (/proc/PID/cmdline); give --zk-auth-file FILE or ${ENV_AUTH}")
    if args.zk_auth_file:
        return read_auth_file(args.zk_auth_file)
    if env_file:
        return read_auth_file(env_file)
    if from_env:
        return _check(from_env.strip(), f"${ENV_AUTH}")
    if not args.insecure:
        raise ConfigError("refusing to start without ZooKeeper authentication: whoever can reach ZooKeeper "
                          "would control the cluster. Give --zk-auth-file FILE (user:password, mode 0600) "
                          f"or ${ENV_AUTH}, or --insecure to run open")
    return None


def warn_insecure(log=None):
    print(INSECURE_WARNING, file=sys.stderr, flush=True)
    if log is not None:
        log.warning("%s", INSECURE_WARNING)
