"""Keyed state on disk (``bittern.state.backend = disk``): ``state.keyed`` kept in an
embedded RocksDB (the ``rocksdict`` bindings), for state larger than the instance's
memory, with the same API and the same checkpoints as the memory backend.

Why RocksDB (rocksdict). The store must keep the instance's memory bounded whatever the
state's size, so it must not map the data into the process (LMDB's mmap makes every page
read or written resident: at 10M keys the instance's RSS is the database's size);
RocksDB reads through a bounded block cache and writes through bounded memtables, the
design Flink's large-state backend chose for the same reason. ``rocksdict`` is the
maintained binding, with manylinux wheels (no compiler, no system library). Its
iterators are point-in-time views (RocksDB pins the version they were made on), which
is what makes an asynchronous full snapshot cheap: see :func:`dump_base`.

Layout. One database per task incarnation, scratch only (write-ahead log off): the
durable copy of the state is the checkpoint, and a restarted or restored task rebuilds
its database from one. A key is stored as the 4-byte big-endian key group followed by
the key's msgpack encoding (the checkpoint's own encoding), a value as its msgpack
encoding; so a group is a contiguous key range (a rescale or a base reads one group
with one seek) and a base's bytes are copied to and from the database without being
decoded. Keys are compared by that encoding: unlike a dict, ``1`` and ``1.0`` are two
keys here.

In front of the database, one dict holds recently read and written values (decoded,
``cache_entries`` of them), and the keys written since the last flush (at most
``write_buffer``) are written to the database together in one batch. A value is
encoded when it is flushed, so the rule of the memory backend holds here too: a value
changed in place must be put again (here to reach the database at all once it left the
cache, not only to reach an incremental checkpoint).

Checkpoints. Deltas are exactly the memory backend's: the change log (``put`` and
``delete`` record the key and value) detached at the barrier and encoded on the loop.
A base (a compaction, or a full snapshot) is written from the database: at the
barrier the loop flushes the pending writes and makes an iterator (O(1)); the writer
thread streams the groups through it into the base format, raw bytes, while the loop
goes on writing. A task restores by streaming the base's groups raw into a fresh
database, then applying the deltas (:func:`load_chain`). Checkpoint files are the same
as the memory backend's, so a topology may switch backends between runs, restore a
savepoint taken with the other one, and rescale by key groups either way.
"""
from __future__ import annotations

import io
import logging
import os
import shutil
import struct

import msgpack

from ..errors import ConfigError
from .changelog import DELETED
from .state import (_FORMAT, FORMAT_VERSION, KeyedState, StateError, StateFormatError,
                    StateOwnershipError, StateTypeError, _at, _default, _ext_hook, _find_bad, _packb,
                    _unpackb, check_doc)

log = logging.getLogger("bittern.state")

_PREFIX = struct.Struct(">I")
_PAIR = b"\x92"  # msgpack fixarray of 2: a [key, value] pair of a base
_MISS = object()
BACKENDS = ("memory", "disk")


_M_ARENA_MAX, _M_MMAP_THRESHOLD = -8, -3  # glibc's mallopt parameters


def _limit_malloc_arenas(n=2):
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core),
    and memory freed in one is not reused by another: RocksDB's background threads
    allocate and free large blocks, so RocksDB's and Flink's docs advise few arenas
    (MALLOC_ARENA_MAX) or jemalloc. Applied once, before RocksDB starts its threads,
    unless the user set MALLOC_ARENA_MAX; no effect where malloc is not glibc's. (On
    this project's 2-CPU machine its effect alone was within run-to-run noise; the
    whole of the disk backend's memory is measured by scripts/bench.py.)"""
    global _ARENAS_SET
    if _ARENAS_SET:
        return
    _ARENAS_SET = True
    if "MALLOC_ARENA_MAX" in os.environ:
        return  # (the user chose)
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_ARENA_MAX, n)
        # a fixed mmap threshold: glibc otherwise raises it to the size of each large
        # block freed (RocksDB's memtable arenas), after which such blocks come from the
        # heap and are never given back
        libc.mallopt(_M_MMAP_THRESHOLD, 128 << 10)
    except (OSError, AttributeError) as e:
        log.debug("mallopt(M_ARENA_MAX) not applied: %s", e)


_ARENAS_SET = False


def rocksdict_module():
    """The ``rocksdict`` module, or a :class:`ConfigError` saying how to get it."""
    try:
        import rocksdict
    except ImportError as e:
        raise ConfigError(f"bittern.state.backend = disk needs the rocksdict package "
                          f"(pip install 'bittern[disk]'): {e}") from None
    return rocksdict


def _prefix(group):
    return _PREFIX.pack(group)


# the loop's encoder (packb would make a Packer per call); only the instance's loop uses it
_pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack


class DiskKeyedState(KeyedState):
    """``state.keyed`` in a RocksDB database at ``path`` (created empty; removed by
    :meth:`close`). Same API as :class:`~bittern.api.state.KeyedState`, except that
    ``items()`` is an iterator (over a point-in-time view: safe to modify the state
    meanwhile) and ``len()`` counts the database (O(entries))."""

    def __init__(self, key_groups, owned_groups, path, change_log=True, cache_entries=25_000,
                 write_buffer=8192, memtable_mb=8, block_cache_mb=16):
        super().__init__(key_groups, owned_groups, change_log)
        rd = rocksdict_module()
        _limit_malloc_arenas()
        self._groups = None  # (the memory backend's dicts: not used)
        self.path = path
        self.cache_entries = max(1, int(cache_entries))
        self.write_buffer = max(1, int(write_buffer))
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, mode=0o700)
        opts = rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(int(memtable_mb) << 20)
        opts.set_max_write_buffer_number(2)
        # output files of a compaction as large as a memtable (RocksDB's default is 64 MB):
        # a table's filter is built from 8 bytes per key held until the file is done, so a
        # 64 MB file of small entries (~8M keys) held ~60 MB more at each compaction (peak
        # RSS of 10M puts: 141 MB against 76 MB with 8 MB files)
        opts.set_target_file_size_base(int(memtable_mb) << 20)
        opts.set_max_open_files(256)
        opts.set_keep_log_file_num(2)
        table = rd.BlockBasedOptions()
        table.set_block_cache(rd.Cache(int(block_cache_mb) << 20))
        # (index and filter blocks stay with their table, outside the block cache: a few
        # bytes per key, and a get never waits for them to be read again)
        table.set_bloom_filter(10, False)  # a get of a key never stored reads no data block
        opts.set_block_based_table_factory(table)
        self._rd = rd
        self._db = rd.Rdict(path, opts)
        wo = rd.WriteOptions()
        wo.disable_wal = True  # scratch: a crash restores from the checkpoint, not from here
        self._db.set_write_options(wo)
        self._cache = {}  # key -> value or DELETED, decoded (written or read recently)
        self._dirty = {}  # key -> group: written to the cache, not yet to the database

    def _key(self, group, key):
        return _PREFIX.pack(group) + _pack(key)

    # -- reads
    def get(self, key, default=None):
        v = self._cache.get(key, _MISS)
        if v is _MISS:
            raw = self._db.get(self._key(self.key_groups.group_of(key), key))
            v = DELETED if raw is None else _unpackb(raw)
            if len(self._cache) >= self.cache_entries:
                self._evict()
            self._cache[key] = v
        return default if v is DELETED else v

    def __contains__(self, key):
        return self.get(key, _MISS) is not _MISS

    # -- writes
    def put(self, key, value):
        g = self._group_for_put(key, value)
        self._write(key, g, value)

    def delete(self, key):
        """Remove ``key`` (no error if absent)."""
        if self.get(key, _MISS) is not _MISS:
            self._write(key, self.key_groups.group_of(key), DELETED)

    def _write(self, key, g, value):
        cache = self._cache
        if key not in cache and len(cache) >= self.cache_entries:
            self._evict()
        cache[key] = value
        self._dirty[key] = g
        self._record(g, key, value)
        if len(self._dirty) >= self.write_buffer:
            self.flush()

    def _evict(self):
        self.flush()
        self._cache.clear()

    def flush(self):
        """Write the pending writes to the database (one batch)."""
        dirty = self._dirty
        if not dirty:
            return
        wb = self._rd.WriteBatch(raw_mode=True)
        cache, key_of = self._cache, self._key
        for key, g in dirty.items():
            v = cache[key]
            if v is DELETED:
                wb.delete(key_of(g, key))
            else:
                wb.put(key_of(g, key), _encode_value(key, g, v))
        self._db.write(wb)
        dirty.clear()

    # -- whole-store views
    def _iter_group(self, it, g):
        p = _prefix(g)
        it.seek(p)
        while it.valid():
            k = it.key()
            if k[:4] != p:
                return
            yield k, it.value()
            it.next()

    def _group_range(self):
        return range(self.key_groups.n_groups) if self._owned is None else sorted(self._owned)

    def groups(self):
        """The key groups that hold at least one entry, sorted."""
        self.flush()
        it = self._db.iter()
        return [g for g in self._group_range() if next(self._iter_group(it, g), None) is not None]

    def group_items(self, group):
        self.flush()
        return [(_unpackb(k[4:]), _unpackb(v)) for k, v in self._iter_group(self._db.iter(), group)]

    def items(self):
        """``(key, value)`` pairs, group by group: an iterator over the state as it is now."""
        self.flush()
        it = self._db.iter()
        for g in self._group_range():
            for k, v in self._iter_group(it, g):
                yield _unpackb(k[4:]), _unpackb(v)

    def __len__(self):
        self.flush()
        it = self._db.iter()
        return sum(1 for g in self._group_range() for _ in self._iter_group(it, g))

    def __repr__(self):
        return f"<DiskKeyedState {self.path} ({self.key_groups.n_groups} key groups)>"

    # -- checkpoints
    def view(self):
        """What a base of the state as it is now is written from, off the loop: the
        pending writes flushed (O(write_buffer)) and a point-in-time iterator (O(1))."""
        self.flush()
        ro = self._rd.ReadOptions()
        ro.fill_cache(False)  # (a full scan would push out of the block cache what gets read)
        return _View(self._db.iter(ro), list(self._group_range()))

    def load_groups(self, data, want=None):
        """Write the keyed groups of base ``data`` (bytes of a version-1 document) into
        the database raw, only the groups in ``want`` (None: all); returns the rest of
        the document (plain, system, system_keyed)."""
        up = msgpack.Unpacker(io.BytesIO(data), raw=False, strict_map_key=False, ext_hook=_ext_hook,
                              max_buffer_size=0)
        rest = {}
        view = memoryview(data)
        try:
            for _ in range(up.read_map_header()):
                name = up.unpack()
                if name != "keyed":
                    rest[name] = up.unpack()
                    continue
                for _ in range(up.read_array_header()):
                    if up.read_array_header() != 2:
                        raise StateFormatError("corrupt state snapshot: a keyed entry is not [group, pairs]")
                    g = up.unpack()
                    n = up.read_array_header()
                    if not isinstance(g, int) or (want is not None and g not in want):
                        for _ in range(n):
                            up.skip()
                        continue
                    self._own(g)
                    wb, p = self._rd.WriteBatch(raw_mode=True), _prefix(g)
                    for _ in range(n):
                        if up.read_array_header() != 2:
                            raise StateFormatError("corrupt state snapshot: a keyed pair is not [key, value]")
                        k0 = up.tell()
                        up.skip()
                        k1 = up.tell()
                        up.skip()
                        wb.put(p + bytes(view[k0:k1]), bytes(view[k1:up.tell()]))
                    self._db.write(wb)
        except StateError:
            raise
        except Exception as e:  # msgpack's errors, a short read
            raise StateFormatError(f"not a state snapshot (msgpack: {type(e).__name__}: {e})") from e
        rest.setdefault("keyed", [])
        if rest.get("format") != _FORMAT:
            raise StateFormatError("not a state snapshot (no bittern-state header)")
        check_doc(rest)
        return rest

    def apply_delta(self, doc, want=None):
        """Apply a read delta document's keyed changes (``deltas.read_doc`` form)."""
        wb = self._rd.WriteBatch(raw_mode=True)
        for g, entries in doc["changed"].items():
            if want is None or g in want:
                self._own(g)
                p = _prefix(g)
                for k, v in entries.items():
                    wb.put(p + _packb(k), _packb(v))
        for g, keys in doc["deleted"]:
            if want is None or g in want:
                p = _prefix(g)
                for k in keys:
                    wb.delete(p + _packb(k))
        self._db.write(wb)
        self._cache.clear()

    def _own(self, g):
        if self._owned is not None and g not in self._owned:
            raise StateOwnershipError(f"restore: key group {g} is not owned by this task")

    def close(self):
        """Close the database and remove its files (it is scratch)."""
        db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except Exception as e:  # noqa: BLE001 - closing scratch: report, go on
                log.warning("closing the state database %s: %s", self.path, e)
        shutil.rmtree(self.path, ignore_errors=True)


def _encode_value(key, g, value):
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError) as e:
        bad = _find_bad(value)
        where = f"the value{_at(bad[0])} is {bad[1]}" if bad else str(e)
        raise StateTypeError(f"state.keyed (group {g}) key {key!r}: {where} (put() checks only a value's "
                             f"top-level type; this one is nested or was changed after put)") from e


class _View:
    """A point-in-time iterator over a disk store, and the groups to read through it."""

    __slots__ = ("it", "groups")

    def __init__(self, it, groups):
        self.it, self.groups = it, groups


def _nonempty(it, groups):
    """The groups of ``groups`` holding at least one entry (one seek each)."""
    out = []
    for g in groups:
        p = _prefix(g)
        it.seek(p)
        if it.valid() and it.key()[:4] == p:
            out.append(g)
    return out


def dump_base(view, n_groups, plain, system, system_keyed):
    """A full (version-1) state document as byte chunks, one key group at a time, read
    through ``view`` (:meth:`DiskKeyedState.view`) with the entries' bytes copied as
    they are; ``plain``, ``system``, ``system_keyed``: the other stores, packed at the
    barrier (``State.encode_rest``). Runs on the writer thread. A group's entries are
    appended to one buffer (no list of millions of small objects to fragment the
    heap), its count packed in front once known."""
    pk = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)
    it = view.it
    live = _nonempty(it, view.groups)  # (the document's array of groups is counted first)
    yield pk.pack_map_header(7) + pk.pack("format") + pk.pack(_FORMAT) + pk.pack("version") + \
        pk.pack(FORMAT_VERSION) + pk.pack("key_groups") + pk.pack(n_groups) + pk.pack("plain") + \
        plain + pk.pack("keyed") + pk.pack_array_header(len(live))
    for g in live:
        p = _prefix(g)
        it.seek(p)
        buf, n = bytearray(), 0
        while it.valid():
            k = it.key()
            if k[:4] != p:
                break
            buf += _PAIR
            buf += k[4:]
            buf += it.value()
            n += 1
            it.next()
        if not n:  # (a point-in-time view cannot lose a group between the two passes)
            raise StateError(f"state database changed during a snapshot: key group {g} is empty")
        yield pk.pack_array_header(2) + pk.pack(g) + pk.pack_array_header(n)
        yield buf  # (a bytearray: written as it is, no copy)
        del buf
    yield pk.pack("system") + system + pk.pack("system_keyed") + system_keyed


def disk_settings(conf):
    """``(backend, options)`` of a merged topology config, checked: ``options`` the
    keyword arguments of :class:`DiskKeyedState` besides the path (None for memory)."""
    backend = conf.get("bittern.state.backend", "memory")
    if backend not in BACKENDS:
        raise ConfigError(f"bittern.state.backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    opts = {}
    for key, arg, low in (("bittern.state.disk.cache.entries", "cache_entries", 1),
                          ("bittern.state.disk.write.buffer", "write_buffer", 1),
                          ("bittern.state.disk.memtable.mb", "memtable_mb", 1),
                          ("bittern.state.disk.block.cache.mb", "block_cache_mb", 1)):
        val = conf.get(key)
        if val is None:
            continue
        if isinstance(val, bool) or not isinstance(val, int) or val < low:
            raise ConfigError(f"{key} must be a whole number >= {low}, got {val!r}")
        opts[arg] = val
    if backend == "memory":
        return backend, None
    rocksdict_module()
    return backend, opts


def keyed_factory(conf, key_groups, topology, task, work_dir, change_log=True):
    """A function of a task's owned groups making its empty keyed store under the
    configured backend, or None for the memory backend (``State``'s default). Each
    store gets a new directory ``<dir>/<topology>/task-<task>.<pid>.<n>`` (``dir``:
    ``bittern.state.disk.dir``, by default ``<work_dir>/state-db``, a directory local
    to the host); directories left by dead processes of the same task are removed."""
    backend, opts = disk_settings(conf)
    if backend == "memory":
        return None
    root = os.path.join(os.path.abspath(os.path.expanduser(conf.get("bittern.state.disk.dir") or
                                                           os.path.join(work_dir, "state-db"))), topology)
    os.makedirs(root, mode=0o700, exist_ok=True)
    _remove_stale(root, task)
    made = [0]

    def make(owned):
        made[0] += 1
        path = os.path.join(root, f"task-{task}.{os.getpid()}.{made[0]}")
        return DiskKeyedState(key_groups, owned, path, change_log, **opts)
    return make


def _remove_stale(root, task):
    import psutil
    for name in os.listdir(root):
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == f"task-{task}" and parts[1].isdigit() and \
                int(parts[1]) != os.getpid() and not psutil.pid_exists(int(parts[1])):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
