"""ZeroMQ CURVE for stream managers on different hosts.

Stream managers exchange tuples over ``tcp://``; across hosts that traffic must
be encrypted and must come only from the topology's own stream managers. CURVE
gives both: every stream manager has a keypair, binds its peer socket as a CURVE
server, and connects to its peers as a CURVE client knowing their public keys.

Encryption alone does not keep strangers out: a server's public key is not a
secret, and without a ZAP handler libzmq admits *any* client that completes the
handshake. :class:`KeyAuthenticator` is that handler: it admits exactly the
public keys it is given (the topology's stream managers) and refuses the rest.
It wraps pyzmq's ``ThreadAuthenticator`` rather than a hand-written ZAP loop: that
one already speaks the ZAP protocol correctly (request framing, status codes,
user ids), answers in its own thread so handshakes never wait on the stream
manager's loop, and its curve-callback hook lets the allowed set be a plain
in-memory set that :meth:`KeyAuthenticator.allow` swaps atomically on a rebalance.

Keys are z85 text (40 characters), so they travel in JSON plans as they are.
Set the options before ``bind``/``connect``, and start the authenticator (on the
server socket's context) before ``bind``.
"""
from __future__ import annotations

import logging
import os

import zmq
from zmq.auth.thread import ThreadAuthenticator

from .errors import BitternError
from .lograte import Throttle

log = logging.getLogger("bittern.curve")


class CurveError(BitternError):
    """CURVE is unavailable or a key is malformed."""


def available():
    """Whether this libzmq was built with CURVE (libsodium or tweetnacl)."""
    return bool(zmq.has("curve"))


def _require():
    if not available():
        raise CurveError(f"libzmq {zmq.zmq_version()} was built without CURVE; stream managers on "
                         "different hosts need it (install a pyzmq wheel, which bundles it)")


def _key(key, what):
    """A z85 key as bytes (also accepts a raw 32-byte key)."""
    if isinstance(key, str):
        try:
            key = key.encode("ascii")
        except UnicodeEncodeError:
            raise CurveError(f"{what} is not valid z85: {key!r:.60}") from None
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return zmq.utils.z85.encode(bytes(key))
    if not isinstance(key, (bytes, bytearray)) or len(key) != 40:
        raise CurveError(f"{what} must be a 40-character z85 CURVE key, got {key!r:.60}")
    try:
        zmq.utils.z85.decode(bytes(key))
    except (ValueError, KeyError):
        raise CurveError(f"{what} is not valid z85: {key!r}") from None
    return bytes(key)


def generate():
    """A new ``(public, secret)`` keypair as z85 strings."""
    _require()
    public, secret = zmq.curve_keypair()
    return public.decode("ascii"), secret.decode("ascii")


def public_of(secret):
    """The public key that belongs to ``secret`` (z85 string)."""
    _require()
    return zmq.curve_public(_key(secret, "secret key")).decode("ascii")


def server_options(sock, secret, public=None):
    """Make ``sock`` a CURVE server with its own keypair (``public`` is derived when None)."""
    _require()
    secret = _key(secret, "server secret key")
    sock.curve_secretkey = secret
    sock.curve_publickey = _key(public, "server public key") if public else zmq.curve_public(secret)
    sock.curve_server = True


def client_options(sock, server_public, own_public, own_secret):
    """Make ``sock`` a CURVE client of the server whose public key is ``server_public``."""
    _require()
    sock.curve_serverkey = _key(server_public, "server public key")
    sock.curve_publickey = _key(own_public, "client public key")
    sock.curve_secretkey = _key(own_secret, "client secret key")


class KeyAuthenticator:
    """ZAP handler for one context that admits only the given client public keys.

    Use as a context manager, or ``start()``/``stop()``. One per context (libzmq
    allows one ZAP handler per context); it covers every CURVE server socket of
    that context. ``denied`` counts refused handshakes.
    """

    def __init__(self, context, allowed=()):
        _require()
        self._allowed = frozenset()
        self.allow(allowed)
        self.denied = 0
        self._throttle = Throttle()  # a peer trying keys in a loop must not flood the log
        self._auth = ThreadAuthenticator(context, log=log)
        self._auth.configure_curve_callback("*", credentials_provider=self)

    def allow(self, keys):
        """Replace the admitted client public keys (takes effect for new handshakes)."""
        self._allowed = frozenset(_key(k, "allowed client key") for k in keys)

    @property
    def allowed(self):
        return {k.decode("ascii") for k in self._allowed}

    def callback(self, domain, key):
        """Called by the ZAP thread with the client's z85 public key."""
        ok = bytes(key) in self._allowed
        if not ok:
            self.denied += 1
            suffix = self._throttle.take()
            if suffix is not None:
                log.warning("refused a CURVE client with an unknown public key %s%s", bytes(key).decode("ascii"),
                            suffix)
        return ok

    def start(self):
        self._auth.start()
        return self

    def stop(self):
        if self._auth.is_alive():
            self._auth.stop()
        else:  # never started, or its thread died: release the sockets without a handshake
            for sock in (self._auth.pipe, self._auth.zap_socket):
                if sock is not None:
                    sock.close(linger=0)
            self._auth.pipe = self._auth.zap_socket = None

    def is_alive(self):
        return self._auth.is_alive()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def load_or_create_keypair(path):
    """This daemon's long-term keypair (z85 ``(public, secret)``), kept in ``path`` as
    JSON, private to this user (0600: created so, refused otherwise)."""
    import json
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        public, secret = generate()
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump({"public": public, "secret": secret}, f)
        os.replace(tmp, path)
        return public, secret
    except OSError as e:
        raise CurveError(f"cannot read the key file {path!r}: {e.strerror}") from None
    with os.fdopen(fd) as f:
        mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
        if mode & 0o077:
            raise CurveError(f"key file {path!r} is accessible by others (mode {mode:04o}); run: chmod 600 {path}")
        try:
            doc = json.load(f)
            public, secret = _key(doc["public"], "public key"), _key(doc["secret"], "secret key")
        except (ValueError, KeyError, TypeError) as e:
            raise CurveError(f"key file {path!r} is not a keypair ({type(e).__name__}); delete it to make "
                             "a new one") from None
    if zmq.curve_public(secret) != public:
        raise CurveError(f"key file {path!r}: the public key does not belong to the secret key")
    return public.decode("ascii"), secret.decode("ascii")


# Sealed boxes (libsodium's crypto_box_seal, through PyNaCl): a CURVE key is an X25519
# key, so a container's secret can travel through ZooKeeper encrypted to the public key
# of the one supervisor that runs the container; only that supervisor can open it.

def seal(secret, recipient_public):
    """``secret`` (z85) encrypted to ``recipient_public`` (z85), as base64 text."""
    import base64

    from nacl.public import PublicKey, SealedBox
    box = SealedBox(PublicKey(zmq.utils.z85.decode(_key(recipient_public, "recipient public key"))))
    return base64.b64encode(box.encrypt(_key(secret, "secret key"))).decode("ascii")


def unseal(sealed, own_secret):
    """The z85 secret in ``sealed`` (from :func:`seal`), opened with ``own_secret``;
    :class:`CurveError` if it was not sealed to this key or was altered."""
    import base64
    import binascii

    from nacl.exceptions import CryptoError
    from nacl.public import PrivateKey, SealedBox
    try:
        data = base64.b64decode(str(sealed).encode("ascii"), validate=True)
        opened = SealedBox(PrivateKey(zmq.utils.z85.decode(_key(own_secret, "secret key")))).decrypt(data)
    except (CryptoError, binascii.Error, UnicodeEncodeError, ValueError):
        raise CurveError("a sealed key cannot be opened with this supervisor's key (sealed to another "
                         "supervisor, or altered)") from None
    return _key(opened, "sealed secret key").decode("ascii")
