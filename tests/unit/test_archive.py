"""Topology code archives: layout, determinism, limits, and hostile archives refused."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import time

import pytest

from bittern import archive
from bittern.archive import ArchiveError, build, extract
from bittern.errors import TopologyError
from bittern.loader import code_paths


def write(path, text="x = 1\n", mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)
    return path


@pytest.fixture
def project(tmp_path):
    """A streamparse-style project: topologies/wc.py, src/pkg, requirements.txt, junk."""
    root = tmp_path / "proj"
    topo = write(str(root / "topologies" / "wc.py"), "import pkg\n")
    write(str(root / "topologies" / "helpers.py"))
    write(str(root / "topologies" / "run.sh"), "#!/bin/sh\n", mode=0o755)
    write(str(root / "src" / "pkg" / "__init__.py"))
    write(str(root / "requirements.txt"), "msgpack\n")
    for junk in (".git/config", "__pycache__/helpers.cpython-311.pyc", ".venv/bin/python",
                 "node_modules/x.js", ".bittern/state", "venv/x", ".pytest_cache/v", ".mypy_cache/m",
                 ".hg/store"):
        write(str(root / "topologies" / junk))
    write(str(root / "topologies" / "stale.pyc"))
    write(str(root / "src" / "pkg" / "__pycache__" / "x.pyc"))
    write(str(root / "unrelated" / "big.csv"))  # outside the code paths
    return topo


def members(data):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_layout_follows_code_paths_and_excludes_junk(project):
    a = build(project)
    assert a.entry == "topologies/wc.py"
    assert a.files == ["requirements.txt", "src/pkg/__init__.py", "topologies/helpers.py",
                       "topologies/run.sh", "topologies/wc.py"]
    assert a.requirements == "requirements.txt"
    assert a.digest == hashlib.sha256(a.data).hexdigest()
    ms = members(a.data)
    assert set(ms) == set(a.files)
    for m in ms.values():
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
        assert m.isreg()
    assert ms["topologies/run.sh"].mode == 0o755
    assert ms["topologies/wc.py"].mode == 0o644


def test_extracted_tree_gives_the_same_code_paths(project, tmp_path):
    a = build(project)
    dest = extract(a.data, str(tmp_path / "code" / a.digest), digest=a.digest)
    entry = os.path.join(dest, a.entry)
    assert [os.path.relpath(p, dest) for p in code_paths(entry)] == ["topologies", "src"]
    with open(entry) as f:
        assert f.read() == "import pkg\n"
    assert os.stat(os.path.join(dest, "topologies", "run.sh")).st_mode & 0o111


def test_same_tree_same_bytes(project):
    a = build(project)
    time.sleep(0.01)
    now = time.time() + 1000
    for dirpath, _, filenames in os.walk(os.path.dirname(os.path.dirname(project))):
        for fn in filenames:
            os.utime(os.path.join(dirpath, fn), (now, now))  # touching files changes nothing
    b = build(project)
    assert a.data == b.data and a.digest == b.digest
    # gzip header: mtime 0, no file name
    assert a.data[4:8] == b"\0\0\0\0" and not (a.data[3] & 0x08)


def test_a_changed_file_changes_the_digest(project):
    a = build(project)
    write(os.path.join(os.path.dirname(project), "helpers.py"), "x = 2\n")
    assert build(project).digest != a.digest


def test_plain_directory_without_src(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    write(str(tmp_path / "wc" / "requirements.txt"), "six\n")
    write(str(tmp_path / "other.py"))  # beside the directory: not code
    a = build(topo)
    assert a.files == ["wc/requirements.txt", "wc/topo.py"]
    assert a.entry == "wc/topo.py" and a.requirements == "wc/requirements.txt"


def test_src_inside_the_topology_directory(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    write(str(tmp_path / "wc" / "src" / "m.py"))
    assert build(topo).files == ["wc/src/m.py", "wc/topo.py"]


def test_topology_in_the_src_directory_itself(tmp_path):
    topo = write(str(tmp_path / "p" / "src" / "topo.py"))
    assert build(topo).files == ["src/topo.py"]


def test_extra_paths_go_to_the_root(tmp_path, project):
    lib = write(str(tmp_path / "lib" / "mylib" / "m.py"))
    a = build(project, extra_paths=[os.path.dirname(lib)])
    assert "mylib/m.py" in a.files
    with pytest.raises(ArchiveError, match="clashes with 'src'"):
        build(project, extra_paths=[str(tmp_path / "proj" / "src")])
    with pytest.raises(ArchiveError, match="does not exist"):
        build(project, extra_paths=[str(tmp_path / "nope")])


def test_symlinks(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    outside = write(str(tmp_path / "shared.py"), "y = 1\n")
    os.symlink(outside, tmp_path / "wc" / "shared.py")
    os.symlink(tmp_path, tmp_path / "wc" / "loop")  # a directory link: not followed
    os.symlink(tmp_path / "missing", tmp_path / "wc" / "broken.py")
    a = build(topo)
    assert a.files == ["wc/shared.py", "wc/topo.py"]
    assert members(a.data)["wc/shared.py"].isreg()  # stored as the file, not as a link
    assert sorted(os.path.basename(p) for p, _ in a.skipped) == ["broken.py", "loop"]


def test_topology_file_too_large_to_pack(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"), "x = 1\n" * 100)
    with pytest.raises(ArchiveError, match=r"topology file '.*topo\.py' cannot be packed \(larger than 10 bytes\)"):
        build(topo, max_bytes=10)


def test_missing_topology_file(tmp_path):
    with pytest.raises(TopologyError, match=r"topology file '.*nope\.py' does not exist"):
        build(str(tmp_path / "nope.py"))


def test_oversized_file_is_skipped_and_oversized_archive_refused(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    with open(tmp_path / "wc" / "data.bin", "wb") as f:
        f.write(os.urandom(5000))
    a = build(topo, max_bytes=4000)
    assert a.files == ["wc/topo.py"]
    assert [os.path.basename(p) for p, _ in a.skipped] == ["data.bin"]
    for i in range(3):  # each fits alone, together they do not (random bytes do not compress)
        with open(tmp_path / "wc" / f"d{i}.bin", "wb") as f:
            f.write(os.urandom(3000))
    with pytest.raises(ArchiveError) as ei:
        build(topo, max_bytes=4000)
    msg = str(ei.value)
    assert "topo.py" in msg and "exceeds 4000 bytes" in msg and "\n" not in msg
    assert isinstance(ei.value, TopologyError)


def test_walk_stops_long_before_reading_a_huge_tree(tmp_path):
    """A topology saved in $HOME must not pack $HOME: the walk gives up early even when
    the files would compress below the limit."""
    topo = write(str(tmp_path / "home" / "topo.py"))
    for i in range(40):
        with open(tmp_path / "home" / f"zeros{i}", "wb") as f:
            f.write(b"\0" * 900)
    with pytest.raises(ArchiveError, match="exceeds 1000 bytes .*move data out of it"):
        build(topo, max_bytes=1000)


def test_unreadable_files_are_skipped(tmp_path, monkeypatch):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    write(str(tmp_path / "wc" / "secret.key"), mode=0)
    if os.geteuid() == 0:  # root reads everything: answer as the kernel would for a user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, m: False if str(p).endswith("secret.key")
                            else real_access(p, m))
    a = build(topo)
    assert a.files == ["wc/topo.py"]
    assert [(os.path.basename(p), why) for p, why in a.skipped] == [("secret.key", "not readable")]


# -- extract ----------------------------------------------------------------------------


def tar_bytes(*entries):
    """entries: (TarInfo, content bytes or None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, content in entries:
            if content is not None:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
            else:
                tar.addfile(info)
    return buf.getvalue()


def reg(name, content=b"x", mode=0o644):
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, content


def link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def special(name, kind):
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


@pytest.mark.parametrize("entries,named,reason", [
    ([reg("../evil.py")], "../evil.py", "outside"),
    ([reg("a/../../evil.py")], "a/../../evil.py", "outside"),
    ([reg("/etc/evil")], "/etc/evil", "absolute"),
    ([link("a", "/etc/passwd")], "'a'", "link"),
    ([link("a", "../../x")], "'a'", "link"),
    ([link("a", "/etc/passwd", tarfile.LNKTYPE)], "'a'", "link"),
    ([special("dev", tarfile.CHRTYPE)], "'dev'", "not a regular file"),
    ([special("fifo", tarfile.FIFOTYPE)], "'fifo'", "not a regular file"),
    ([reg("suid", mode=0o4755)], "'suid'", "setuid"),
    ([reg("sgid", mode=0o2755)], "'sgid'", "setgid"),
    ([reg("a.py"), reg("a.py", b"evil")], "'a.py'", "twice"),
])
def test_hostile_archives_are_refused_and_leave_nothing(tmp_path, entries, named, reason):
    dest = tmp_path / "out" / "code"
    with pytest.raises(ArchiveError) as ei:
        extract(tar_bytes(*entries), str(dest))
    assert named in str(ei.value) and reason in str(ei.value)
    assert os.listdir(tmp_path / "out") == []  # no dest, no temporary directory
    assert not os.path.exists(tmp_path / "evil.py")


def test_link_then_write_through_it_is_refused(tmp_path):
    data = tar_bytes(link("d", str(tmp_path)), reg("d/evil.py"))
    with pytest.raises(ArchiveError, match="'d' is a link"):
        extract(data, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "evil.py")


def test_digest_mismatch(tmp_path, project):
    a = build(project)
    with pytest.raises(ArchiveError, match=f"expected {'0' * 64}, got {a.digest}"):
        extract(a.data, str(tmp_path / "out"), digest="0" * 64)
    assert not os.path.exists(tmp_path / "out")
    assert extract(a.data, str(tmp_path / "out"), digest=a.digest.upper())


def test_not_an_archive(tmp_path):
    for data in (b"hello", gzip.compress(b"not a tar" * 100), b""):
        with pytest.raises(ArchiveError, match="not a topology archive|corrupt"):
            extract(data, str(tmp_path / "out"))
    a = tar_bytes(reg("a.py", os.urandom(50000)))
    with pytest.raises(ArchiveError):
        extract(a[: len(a) // 2], str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


def test_unpacked_size_is_bounded(tmp_path):
    data = tar_bytes(reg("zeros", b"\0" * 100_000))
    assert len(data) < 1000
    with pytest.raises(ArchiveError, match="'zeros'.*more than 50000 bytes"):
        extract(data, str(tmp_path / "out"), max_bytes=50_000)


def test_existing_dest_and_replace(tmp_path, project):
    a = build(project)
    dest = str(tmp_path / "out")
    extract(a.data, dest)
    with pytest.raises(ArchiveError, match="already exists"):
        extract(a.data, dest)
    write(os.path.join(dest, "leftover.py"))
    extract(a.data, dest, replace=True)
    assert not os.path.exists(os.path.join(dest, "leftover.py"))
    assert sorted(os.listdir(tmp_path)) == ["out", "proj"]


def test_extracted_modes_are_tame(tmp_path):
    data = tar_bytes(reg("a.sh", mode=0o777), reg("b.py", mode=0o666))
    dest = extract(data, str(tmp_path / "out"))
    assert stat.S_IMODE(os.stat(os.path.join(dest, "a.sh")).st_mode) & 0o022 == 0
    assert stat.S_IMODE(os.stat(os.path.join(dest, "b.py")).st_mode) & 0o133 == 0
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o755


def test_round_trip_of_nested_names(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    deep = "wc/" + "/".join(["d" * 40] * 5) + "/ünïcode.py"  # > 100 chars: pax headers
    write(str(tmp_path / deep))
    a = build(topo)
    assert deep in a.files and a.data == build(topo).data
    dest = extract(a.data, str(tmp_path / "out"))
    assert os.path.isfile(os.path.join(dest, deep))


def test_default_limits():
    assert archive.MAX_BYTES == 64 * 1024 * 1024
    assert archive.MAX_MEMBERS == 10_000


def test_member_count_is_bounded_when_extracting(tmp_path):
    """A tar of many tiny members (each a few dozen bytes once gzip'd) is refused at the
    first member past the limit, naming the archive and the count; nothing is left."""
    data = tar_bytes(*[reg(f"f{i}.py", b"") for i in range(51)])
    label = archive.digest_of(data)[:12]
    with pytest.raises(ArchiveError) as ei:
        extract(data, str(tmp_path / "out" / "code"), max_members=50)
    msg = str(ei.value)
    assert msg == f"archive {label} has more than 50 members (refused at member 51, 'f50.py')"
    assert os.listdir(tmp_path / "out") == []
    # directories count too: a directory and 49 files are exactly the limit, one more file is over
    folder = special("d", tarfile.DIRTYPE)
    folder[0].mode = 0o755
    files = [reg(f"d/f{i}.py") for i in range(50)]
    assert extract(tar_bytes(folder, *files[:49]), str(tmp_path / "ok"), max_members=50)
    assert len(os.listdir(tmp_path / "ok" / "d")) == 49
    with pytest.raises(ArchiveError, match="more than 50 members .refused at member 51, 'd/f49.py'"):
        extract(tar_bytes(folder, *files), str(tmp_path / "over"), max_members=50)


def test_member_count_is_bounded_when_packing(tmp_path):
    topo = write(str(tmp_path / "wc" / "topo.py"))
    for i in range(30):
        write(str(tmp_path / "wc" / "data" / f"f{i:02d}.txt"))
    with pytest.raises(ArchiveError) as ei:
        build(topo, max_members=20)
    msg = str(ei.value)
    assert msg.startswith(f"the code of {topo!r} has more than 20 files (stopped counting at 21: ")
    assert "\n" not in msg
    assert len(build(topo, max_members=31).files) == 31
