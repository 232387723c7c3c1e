"""speculators.generator.quiet_del_at_exit on the real generator sources of speculators 0.3.0 and 0.4.0.1.

At interpreter exit a module's globals are None and vLLM's MultiprocExecutor has shut itself down (its
weakref.finalize runs at exit), so the generator's ``__del__`` meets a shutdown() that raises and a ``log`` that
is None.  Here that state is rebuilt around the wheel's own ``__del__`` (no vLLM needed): as released it raises
speculators' AttributeError (the traceback a user sees after every run), patched it is quiet, and with the logger
alive it still warns as upstream does.  The same leave-one-out on a real engine: tests/contract/test_generator_exit.py.
"""

from __future__ import annotations

import ast
import zipfile

import pytest

from compat.layout import GENERATOR
from compat.registry import load_patches
from fixtures.wheels import wheel

PATCH = next(p for p in load_patches() if p.id == "speculators.generator.quiet_del_at_exit")
VARIANTS = {"0.3.0": "0.3.0", "0.4.0.1": "0.4.x"}


class _Executor:
    def shutdown(self):
        raise RuntimeError("already shut down by vLLM's finalizer")


class _Generator:
    executor = _Executor()


class _Log:
    def __init__(self):
        self.said = []

    def warning(self, text):
        self.said.append(text)


def _del_of(source: str, log):
    """The generator class's ``__del__`` compiled from ``source`` with ``log`` as its module global."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VllmHiddenStatesGenerator")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__del__")
    namespace = {"log": log}
    exec(compile(ast.Module(body=[method], type_ignores=[]), GENERATOR, "exec"), namespace)  # noqa: S102
    return namespace["__del__"]


def _sources(version: str) -> tuple[str, str]:
    with zipfile.ZipFile(wheel(f"speculators=={version}")) as zf:
        released = zf.read(GENERATOR).decode()
    patched = released
    for edit in PATCH.edits[VARIANTS[version]][GENERATOR]:
        patched = edit.apply(patched, GENERATOR)
    return released, patched


@pytest.mark.parametrize("version", sorted(VARIANTS))
def test_the_released_del_raises_the_users_traceback_at_exit(version):
    released, _ = _sources(version)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'warning'"):
        _del_of(released, None)(_Generator())
    assert PATCH.symptom in "AttributeError: 'NoneType' object has no attribute 'warning'"


@pytest.mark.parametrize("version", sorted(VARIANTS))
def test_the_patched_del_is_quiet_at_exit_and_still_warns_while_running(version):
    _, patched = _sources(version)
    _del_of(patched, None)(_Generator())  # no exception at exit
    log = _Log()
    _del_of(patched, log)(_Generator())
    assert log.said == ["Exception during executor shutdown"]  # upstream's warning, unchanged while alive
