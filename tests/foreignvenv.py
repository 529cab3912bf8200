"""Throwaway virtualenvs holding real packages from PyPI (streamparse, pystorm,
heronpy), for the compatibility tests: never vendored copies.

``foreign_venv(base, requirements)`` makes a venv under ``base`` that sees this
checkout and the project's own venv (a ``.pth`` file: Bittern and its dependencies
come from there) and pip-installs ``requirements`` into it, whose own site-packages
come first. It returns the venv's python; run ``python -m bittern ...`` with it and
every process of the topology (instances, multilang children started with
``sys.executable``) runs in it. A venv is made once per requirement list and test
session. Without PyPI the test fails, naming the package: a compatibility test that
skipped would hide the missing feature.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sysconfig
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def foreign_venv(base, requirements, pip_args=()):
    """The python of a venv under ``base`` with ``requirements`` (pinned specifiers)
    installed from PyPI; ``pip_args``: extra pip flags (e.g. ``--no-deps``)."""
    key = hashlib.sha1(repr((sorted(requirements), list(pip_args))).encode()).hexdigest()[:12]
    path = os.path.join(str(base), f"venv-{key}")
    os.makedirs(str(base), exist_ok=True)
    # one maker at a time: pytest-xdist workers share the venv (see shared_base)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _make(path, requirements, pip_args)


def shared_base(tmp_path_factory, name):
    """A directory for venvs that every pytest-xdist worker of this run shares (the run's
    temp root), or this session's own when not under xdist."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / name


STREAMPARSE_REQUIREMENTS = ["streamparse==5.0.1", "pystorm==3.1.4"]


# The two venvs as session fixtures: a test file imports the one it needs
# (``from foreignvenv import heron_python  # noqa: F401``) and asks for it by name.
@pytest.fixture(scope="session")
def heron_python(tmp_path_factory):
    """The python of this run's heronpy venv (bittern.compat.heron's pins), shared by
    every file and worker that asks."""
    from bittern.compat.heron import PIP_ARGS, PIP_REQUIREMENTS
    return foreign_venv(shared_base(tmp_path_factory, "heronpy"), PIP_REQUIREMENTS, PIP_ARGS)


@pytest.fixture(scope="session")
def streamparse_python(tmp_path_factory):
    """The python of this run's streamparse + pystorm venv, shared likewise."""
    return foreign_venv(shared_base(tmp_path_factory, "foreign-venvs"), STREAMPARSE_REQUIREMENTS)


def _make(path, requirements, pip_args):
    python = os.path.join(path, "bin", "python")
    if os.path.exists(os.path.join(path, ".complete")):
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "bittern-checkout.pth"), "w") as f:
        f.write(f"{ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    r = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *pip_args,
                        *requirements], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(requirements)} into a throwaway venv failed "
                           f"(is PyPI reachable?):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    open(os.path.join(path, ".complete"), "w").close()
    return python


__all__ = ["STREAMPARSE_REQUIREMENTS", "foreign_venv", "heron_python", "shared_base", "streamparse_python"]
