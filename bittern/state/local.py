"""The local-directory state manager: the embedded default (no ZooKeeper).

Each document is a JSON file under ``$BITTERN_HOME/state``; writes go to a temp
file that is fsynced and renamed over the target, so a reader never sees half a
document and a crash never leaves one. There are no ephemeral nodes: liveness
comes from pids (see the supervisor).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

from ..privdir import private_dir
from .base import StateManager


def default_home():
    return os.path.abspath(os.path.expanduser(os.environ.get("BITTERN_HOME") or "~/.bittern"))


class LocalStateManager(StateManager):
    def __init__(self, home=None):
        self.home = os.path.abspath(home or default_home())
        self.root = os.path.join(self.home, "state")
        private_dir(self.home, "Bittern home")  # plans, logs, tokens and state: this user's alone
        os.makedirs(self.root, mode=0o700, exist_ok=True)

    def _file(self, path):
        parts = [p for p in path.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"bad state path {path!r}")
        return os.path.join(self.root, *parts[:-1], parts[-1] + ".json")

    def _dir(self, path):
        return os.path.join(self.root, *[p for p in path.split("/") if p])

    def get(self, path):
        try:
            with open(self._file(path)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def _publish(self, path, doc, publish):
        """Write ``doc`` to a synced temp file beside the target, then ``publish(tmp,
        target)`` (rename: replace; link: exclusive create); the temp file never stays."""
        target = self._file(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            publish(tmp, target)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def put(self, path, doc):
        self._publish(path, doc, os.replace)

    def create(self, path, doc):
        """Exclusive create: hard-linking the temp file to the name fails if the name
        exists (atomic, and no lock file that a crash could leave behind)."""
        try:
            self._publish(path, doc, os.link)
            return True
        except FileExistsError:
            return False

    def _blob(self, path):
        """``put_bytes`` data lives in the path's directory under a dot-name, so
        ``children`` lists the path once (as the ZooKeeper backend does) and
        ``delete`` removes the blob with the document."""
        self._file(path)  # validates the path
        return os.path.join(self._dir(path), ".blob")

    def put_bytes(self, path, data):
        target = self._blob(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass

    def get_bytes(self, path):
        try:
            with open(self._blob(path), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def delete(self, path):
        try:
            os.unlink(self._file(path))
        except FileNotFoundError:
            pass
        shutil.rmtree(self._dir(path), ignore_errors=True)

    def children(self, path):
        try:
            names = os.listdir(self._dir(path))
        except FileNotFoundError:
            return []
        out = set()
        for n in names:
            if n.startswith("."):
                continue
            out.add(n[:-5] if n.endswith(".json") else n)
        return sorted(out)
