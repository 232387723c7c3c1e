"""Run Python as a second user (``nobody``) over files root made, whatever root's umask and cache location.

Why: CI runs as root with a umask that leaves the unit venv (and pytest's copies) unreadable to others, so
``nobody`` started from ``sys.executable`` found no ``packaging``. The second user gets the base interpreter,
plus copies of the kit and its third-party imports in a directory everyone can read.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
THIRD_PARTY = ("packaging", "filelock")  # what ``compat`` imports beyond the standard library
KIT = ("compat", "patches", "fixtures", "tests/__init__.py", "tests/unit/__init__.py", "tests/unit/toy.py")


def make_readable(path: Path) -> None:
    """chmod a+rX on ``path`` and everything under it, and o+x on each parent so it can be reached."""
    for current, dirs, files in os.walk(path):
        os.chmod(current, os.stat(current).st_mode | 0o555)
        for name in files:
            file = Path(current, name)
            if not file.is_symlink():
                os.chmod(file, os.stat(file).st_mode | 0o444)
    for parent in Path(path).resolve().parents:
        if not os.stat(parent).st_mode & 0o001:
            raise AssertionError(f"{parent} is not traversable by other users; choose a directory under /tmp")


def runtime(shared: Path) -> tuple[str, dict[str, str]]:
    """Copy the kit and its third-party imports under ``shared``; return (interpreter, environment)."""
    home = shared / "runtime"
    if not home.exists():
        for rel in KIT:
            source = ROOT / rel
            target = home / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, target)
        for name in THIRD_PARTY:
            package = Path(importlib.util.find_spec(name).origin).parent
            shutil.copytree(package, home / name, ignore=shutil.ignore_patterns("__pycache__"))
        make_readable(home)
    interpreter = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    env = {**os.environ, "PYTHONPATH": str(home), "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("VIRTUAL_ENV", None)
    return interpreter, env


def run(shared: Path, args: list[str], *, pythonpath: tuple[Path, ...] = (), **extra_env) -> subprocess.CompletedProcess:
    """``python ARGS`` as nobody, with the kit from ``shared`` first on the path, then ``pythonpath``."""
    interpreter, env = runtime(shared)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *map(str, pythonpath)])
    env.update(extra_env)
    return subprocess.run([*NOBODY, interpreter, *args], cwd=shared, env=env, capture_output=True, text=True,
                          timeout=120)
