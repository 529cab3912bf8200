"""Topology code archives: what nimbus stores and supervisors fetch in cluster mode.

``build`` packs the code an instance needs into a gzip'd tar: the directory that
holds the topology file (``loader.code_paths`` puts it on ``sys.path``) and, for
streamparse-style projects, the ``src/`` beside that directory's parent together
with the project's ``requirements.txt``. The layout keeps the topology directory
under its own name, so ``code_paths`` of the extracted entry finds the same
directories it found on the submitting machine::

    wordcount/topology.py     <- Archive.entry
    wordcount/helpers.py
    src/mypkg/__init__.py     (only when <parent>/src exists)
    requirements.txt          (only with that src/)

The bytes are deterministic (sorted members, mtime/uid/gid 0, no user names, gzip
mtime 0), so the sha256 digest names the code: resubmitting an unchanged tree
yields the same digest and supervisors can cache by it.

``extract`` treats its input as hostile (it came over the network): only regular
files and directories with relative, ``..``-free names are accepted; links,
devices, fifos and setuid/setgid bits are refused with an error naming the member,
and so is an archive of more than ``MAX_MEMBERS`` members (``build`` refuses to pack
more files than that too).
It writes into a temporary directory beside ``dest`` and renames it into place, so
a crash leaves either no ``dest`` or a complete one (plus, at worst, a stale
``.<dest>.tmp-*`` directory beside it).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field

from .ckptfile import fsync_dir
from .errors import TopologyError
from .loader import code_paths

MAX_BYTES = 64 * 1024 * 1024  # largest archive build() makes
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024  # most bytes extract() writes (gzip bombs)
MAX_MEMBERS = 10_000  # most files build() packs and members (files and directories) extract() takes
# build() gives up walking once the files found add up to this many times max_bytes: no
# code tree compresses that well, and a topology file saved in $HOME must not read $HOME
WALK_FACTOR = 16
EXCLUDED_NAMES = frozenset({".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".pytest_cache",
                            ".mypy_cache", "node_modules", ".bittern"})
EXCLUDED_SUFFIXES = (".pyc",)


class ArchiveError(TopologyError):
    """Topology code cannot be packed, or an archive cannot be unpacked safely."""


@dataclass
class Archive:
    data: bytes  # the .tar.gz
    digest: str  # sha256 hex of data
    entry: str  # the topology file's path inside the archive
    files: list  # member names, sorted
    skipped: list = field(default_factory=list)  # (path, reason) left out: too large, special, symlinked dir
    requirements: str | None = None  # path of requirements.txt inside the archive, if any


def digest_of(data):
    return hashlib.sha256(data).hexdigest()


def build(topology_file, extra_paths=(), max_bytes=MAX_BYTES, max_members=MAX_MEMBERS):
    """Pack the code of ``topology_file`` (see the module docstring for the layout).

    ``extra_paths`` (files or directories) are added at the archive root under their
    base names. A single file larger than ``max_bytes`` is left out (listed in
    ``skipped``); an archive that would exceed ``max_bytes`` or hold more than
    ``max_members`` files is refused.
    """
    path = os.path.abspath(topology_file)
    if not os.path.isfile(path):
        raise ArchiveError(f"topology file {path!r} does not exist" if not os.path.exists(path)
                           else f"topology file {path!r} is not a file")
    here = os.path.dirname(path)
    top = os.path.basename(here) or "topology"
    members, skipped = _Members(path, max_bytes, max_members), []  # arcname -> source path
    _collect(here, top, members, skipped, max_bytes)
    requirements = f"{top}/requirements.txt" if f"{top}/requirements.txt" in members else None
    for p in code_paths(path)[1:]:
        if os.path.dirname(p) != here and os.path.realpath(p) != os.path.realpath(here):
            _collect(p, "src", members, skipped, max_bytes)  # <parent>/src: the project's packages
            req = os.path.join(os.path.dirname(p), "requirements.txt")
            if os.path.isfile(req):
                _collect(req, "requirements.txt", members, skipped, max_bytes)
                requirements = requirements or "requirements.txt"  # the topology's own one wins
    for extra in extra_paths:
        extra = os.path.abspath(extra)
        if not os.path.exists(extra):
            raise ArchiveError(f"extra path {extra!r} does not exist")
        name = os.path.basename(extra.rstrip(os.sep))
        if any(m == name or m.startswith(name + "/") for m in members):
            raise ArchiveError(f"extra path {extra!r} clashes with {name!r} already in the archive")
        _collect(extra, name, members, skipped, max_bytes)
    entry = f"{top}/{os.path.basename(path)}"
    if entry not in members:
        raise ArchiveError(f"topology file {path!r} cannot be packed ({dict(skipped).get(path, 'excluded')})")
    data = _pack(members, max_bytes, path)
    return Archive(data, digest_of(data), entry, sorted(members), skipped, requirements)


class _Members(dict):
    """arcname -> source path, refusing to grow far past what could fit."""

    def __init__(self, topology_file, max_bytes, max_members=MAX_MEMBERS):
        super().__init__()
        self.topology_file, self.max_bytes, self.total = topology_file, max_bytes, 0
        self.max_members = max_members

    def add(self, arcname, src, size):
        if arcname not in self and len(self) >= self.max_members:
            raise ArchiveError(f"the code of {self.topology_file!r} has more than {self.max_members} files "
                               f"(stopped counting at {len(self) + 1}: {arcname!r}); move data out of its "
                               "directory")
        self.total += size
        if self.total > self.max_bytes * WALK_FACTOR:
            raise ArchiveError(f"the code of {self.topology_file!r} exceeds {self.max_bytes} bytes "
                               f"(its directory holds more than {self.total} bytes); move data out of it")
        self[arcname] = src


def _excluded(name):
    return name in EXCLUDED_NAMES or name.endswith(EXCLUDED_SUFFIXES)


def _collect(src, arcname, members, skipped, max_bytes):
    """Add the regular files under ``src`` (a file or a directory) as ``arcname/...``.
    File symlinks are stored as the file they point to; symlinked directories are not
    followed (no cycles, no surprise trees), they are listed in ``skipped``."""
    if os.path.isfile(src):
        _add_file(src, arcname, members, skipped, max_bytes)
        return
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        prefix = arcname if rel == "." else f"{arcname}/{rel.replace(os.sep, '/')}"
        keep = []
        for d in sorted(dirnames):
            if _excluded(d):
                continue
            if os.path.islink(os.path.join(dirpath, d)):
                skipped.append((os.path.join(dirpath, d), "symlinked directory"))
                continue
            keep.append(d)
        dirnames[:] = keep
        for fn in sorted(filenames):
            if not _excluded(fn):
                _add_file(os.path.join(dirpath, fn), f"{prefix}/{fn}", members, skipped, max_bytes)


def _add_file(src, arcname, members, skipped, max_bytes):
    try:
        st = os.stat(src)
    except OSError:
        skipped.append((src, "unreadable or a broken symlink"))
        return
    if not stat.S_ISREG(st.st_mode):
        skipped.append((src, "not a regular file"))
    elif st.st_size > max_bytes:
        skipped.append((src, f"larger than {max_bytes} bytes"))
    elif not os.access(src, os.R_OK):
        skipped.append((src, "not readable"))
    else:
        members.add(arcname, src, st.st_size)


def _pack(members, max_bytes, topology_file):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            src = members[name]
            try:
                with open(src, "rb") as f:
                    content = f.read()
            except OSError as e:
                raise ArchiveError(f"cannot read {src!r} for the archive: {e.strerror}") from None
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o755 if os.stat(src).st_mode & 0o111 else 0o644
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(content))
            if buf.tell() > max_bytes:
                break  # compressed output already too big: stop reading the tree
    if buf.tell() > max_bytes:
        raise ArchiveError(f"the code of {topology_file!r} exceeds {max_bytes} bytes packed "
                           f"({len(members)} files); move data out of its directory")
    return buf.getvalue()


def extract(data, dest, digest=None, replace=False, max_bytes=MAX_UNPACKED_BYTES, max_members=MAX_MEMBERS):
    """Unpack an archive into the directory ``dest`` (which must not exist unless
    ``replace``) and return its absolute path. With ``digest``, refuse data whose
    sha256 differs. Refuse members that could write outside ``dest``, links, special
    files, setuid/setgid bits, and archives that unpack to more than ``max_bytes`` or
    hold more than ``max_members`` members (files and directories)."""
    if digest is not None and digest_of(data) != digest.lower():
        raise ArchiveError(f"archive digest mismatch: expected {digest}, got {digest_of(data)}")
    dest = os.path.abspath(dest)
    if os.path.lexists(dest) and not replace:
        raise ArchiveError(f"cannot extract into {dest!r}: it already exists")
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.tmp-", dir=parent)
    try:
        _unpack(data, tmp, max_bytes, max_members, f"archive {(digest or digest_of(data))[:12]}")
        os.chmod(tmp, 0o755)
        if os.path.lexists(dest):  # replace: move the old tree aside, then swap
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.old-", dir=parent)
            os.rename(dest, os.path.join(old, "x"))
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dest)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _unpack(data, root, max_bytes, max_members=MAX_MEMBERS, label="the archive"):
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise ArchiveError(f"not a topology archive (gzip'd tar): {e}") from None
    seen, total = set(), 0
    with tar:
        try:
            for count, m in enumerate(tar, 1):
                if count > max_members:
                    raise ArchiveError(f"{label} has more than {max_members} members (refused at member "
                                       f"{count}, {m.name[:100]!r})")
                parts = _check_member(m, seen)
                target = os.path.join(root, *parts)
                if m.isdir():
                    try:
                        os.makedirs(target, mode=0o755, exist_ok=True)
                    except OSError as e:
                        raise ArchiveError(f"archive member {m.name!r} cannot be created: {e}") from None
                    continue
                total += m.size
                if total > max_bytes:
                    raise ArchiveError(f"archive member {m.name!r}: archive unpacks to more than "
                                       f"{max_bytes} bytes")
                try:
                    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                    _write(tar.extractfile(m), target, m, 0o755 if m.mode & 0o111 else 0o644)
                except OSError as e:
                    if isinstance(e, gzip.BadGzipFile):
                        raise
                    raise ArchiveError(f"archive member {m.name!r} cannot be written: {e}") from None
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise ArchiveError(f"corrupt topology archive: {e}") from None


def _check_member(m, seen):
    """The member's path components, or an ArchiveError naming it."""
    name = m.name
    if m.issym() or m.islnk():
        raise ArchiveError(f"archive member {name!r} is a link (to {m.linkname!r}); links are refused")
    if not (m.isreg() or m.isdir()):
        raise ArchiveError(f"archive member {name!r} is not a regular file or directory")
    if m.mode & (stat.S_ISUID | stat.S_ISGID):
        raise ArchiveError(f"archive member {name!r} has the setuid or setgid bit")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"archive member {name!r} has an absolute path")
    if "\x00" in name:
        raise ArchiveError(f"archive member {name!r} has a NUL in its name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ArchiveError(f"archive member {name!r} points outside the archive")
    key = "/".join(parts)
    if key in seen and not m.isdir():
        raise ArchiveError(f"archive member {name!r} appears twice")
    seen.add(key)
    return parts


def _write(src, target, member, mode):
    # O_EXCL|O_NOFOLLOW: never write through something already there (we create no links,
    # and duplicates are refused, so anything there is an attack or a bug)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        remaining = member.size
        while remaining > 0:
            chunk = src.read(min(remaining, 1 << 20))
            if not chunk:
                raise ArchiveError(f"archive member {member.name!r} is truncated")
            out.write(chunk)
            remaining -= len(chunk)
        out.flush()
        os.fsync(out.fileno())

