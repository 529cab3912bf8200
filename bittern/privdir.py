"""Private directories: where Bittern keeps sockets, logs, plans and state.

Everything under them is this user's alone (issue 18): a directory another user can
write to, or one another user created first, would let them plant sockets that
restarted processes connect to, swap a plan, or read logs that echo tuples.

:func:`private_dir` creates a directory 0700, or checks the one that exists: a real
directory (not a symlink), owned by this user. One that is ours but open to others
(made by an older release, or by hand) is tightened to 0700 (logged at info). One that is
not ours is refused with a one-line error naming it.

:func:`private_runtime_dir` is the short base for ``ipc://`` socket files in the
shared temp directory (``/tmp/bittern-<uid>``), where anyone may create the name
first: if someone did, Bittern does not fail (that would let any local user stop it
from running) but uses a fresh directory only it can know, and warns naming the
squatted one.
"""
from __future__ import annotations

import logging
import os
import stat
import tempfile

from .errors import BitternError

log = logging.getLogger("bittern.privdir")


class UnsafeDirectory(BitternError):
    """A directory Bittern would keep private things in is not private to this user."""


def check_private(path):
    """None if ``path`` is a real directory owned by this user and closed to others
    (after tightening its mode if it is ours); else the reason it is not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        os.chmod(path, mode & 0o700 | 0o700)
        # (info, not a warning: the CLI's stderr is for one-line errors, and this is done)
        log.info("%s was open to other users (mode %04o); it is 0700 now", path, mode)
    return None


def private_dir(path, what="directory"):
    """``path`` (made with its missing parents), checked private; raises
    :class:`UnsafeDirectory` naming it otherwise."""
    path = os.path.abspath(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise UnsafeDirectory(f"cannot create the {what} {path}: {e.strerror or e}") from None
    bad = check_private(path)
    if bad:
        raise UnsafeDirectory(f"refusing to use the {what} {path}: {bad}")
    return path


_runtime = None


def private_runtime_dir():
    """``$TMPDIR/bittern-<uid>`` if it is (or can be made) ours and private; else a fresh
    private directory, with a warning. The same answer for the life of the process."""
    global _runtime
    if _runtime is not None and check_private(_runtime) is None:
        return _runtime
    base = os.path.join(tempfile.gettempdir(), f"bittern-{os.geteuid()}")
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        log.warning("cannot create %s (%s); using a fresh private directory", base, e.strerror or e)
        base = None
    bad = check_private(base) if base else "unusable"
    if bad:
        if base:
            log.warning("not using %s for this user's sockets: %s (another user may have made it to "
                        "take them over); using a fresh private directory instead", base, bad)
        base = tempfile.mkdtemp(prefix=f"bittern-{os.geteuid()}-")  # 0700, a name nobody could guess
    _runtime = base
    return base
