"""Cluster mode of the CLI: ``bittern --cluster URL[,URL...] VERB`` (or
``BITTERN_CLUSTER``) sends the verb to nimbus instead of the local state directory.

A verb module supports cluster mode by setting ``remote=fn(args, client)`` on its
parser beside ``func``; a verb that has no meaning on a cluster sets ``local_only``
to the one-line reason it is refused.
"""
from __future__ import annotations

import os

from ..auth import client_token
from ..cluster_client import DEFAULT_TIMEOUT, ClusterClient, parse_urls
from ..errors import BitternError

ENV_CLUSTER = "BITTERN_CLUSTER"


def cluster_urls(args, env=None):
    """The nimbus URLs of ``--cluster`` or ``$BITTERN_CLUSTER``, or None (local mode)."""
    env = os.environ if env is None else env
    value = args.cluster if args.cluster is not None else env.get(ENV_CLUSTER)
    return parse_urls(value) if value and value.strip() else None


def connect(args, urls, timeout=DEFAULT_TIMEOUT):
    env = dict(os.environ)
    if getattr(args, "home", None):  # --home is where cluster.toml is looked for, as $BITTERN_HOME
        env["BITTERN_HOME"] = args.home
    return ClusterClient(urls, client_token(env=env), timeout)


def dispatch(args, urls):
    """Run the remote variant of the verb in ``args``."""
    remote = getattr(args, "remote", None)
    if remote is None:
        raise BitternError(getattr(args, "local_only", None)
                           or f"`bittern {args.verb}` works in local mode only (drop --cluster / {ENV_CLUSTER})")
    return remote(args, connect(args, urls)) or 0
