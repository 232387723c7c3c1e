"""Leave-one-out proofs of the speculators-side serve patches on the released code itself (no vLLM started).

Each test loads the real module from the speculators wheel twice, as released
and with the declaration's edits, and shows the bug with the patch left out
and gone with it applied.  They need torch, safetensors and openai (a lane
interpreter, e.g. ``~/.cache/specdec-compat/venvs/pinned/bin/python -m pytest
tests/unit/test_serve_patch_proofs.py``); in the unit venv they are skipped, not passed.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import types

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("openai")

from compat import registry  # noqa: E402
from compat.sources import WheelSource  # noqa: E402
from fixtures.wheels import wheel  # noqa: E402

PATCHES = {p.id: p for p in registry.load_patches("serve")}


def load(requirement: str, relpath: str, patch_id: str | None, variant: str):
    """The module ``relpath`` of the wheel, as released or with ``patch_id``'s edits, executed fresh."""
    text = WheelSource(wheel(requirement)).read(relpath)
    if patch_id:
        for edit in PATCHES[patch_id].edits[variant][relpath]:
            text = edit.apply(text, relpath)
    module = types.ModuleType(relpath.replace("/", ".")[:-3])
    exec(compile(text, relpath, "exec"), module.__dict__)
    return module


def fp8_sample(tmp_path, tokens):
    hidden = torch.randn(len(tokens), 4, 16).to(torch.float8_e4m3fn)
    path = tmp_path / "hs_0.safetensors"
    safetensors_torch.save_file({"hidden_states": hidden, "token_ids": torch.tensor(tokens)}, str(path))
    return safetensors_torch.load_file(str(path))  # as generate-offline-data loads it


@pytest.mark.parametrize("patched", [False, True], ids=["left-out", "applied"])
def test_validate_fp8(tmp_path, patched):
    pid = "speculators.serve.validate_fp8"
    offline = load("speculators==0.9.0", "speculators/data_generation/offline.py", pid if patched else None,
                   "aminmax-raw")
    tokens = [5, 6, 7]
    data = fp8_sample(tmp_path, tokens)
    if not patched:
        with pytest.raises(NotImplementedError, match="aminmax"):
            offline.check_hidden_states(data, tokens)
        return
    assert offline.check_hidden_states(data, tokens) is None
    data["hidden_states"] = data["hidden_states"].float()
    data["hidden_states"][1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):  # the check still checks
        offline.check_hidden_states(data, tokens)


def slow_writer(path: str, tokens, started: threading.Event, seconds: float):
    """vLLM >= 0.22's protocol: LOCK_EX on <path>.lock, write the file, release (close)."""
    fd = os.open(path + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    started.set()
    time.sleep(seconds)
    safetensors_torch.save_file({"hidden_states": torch.ones(len(tokens), 2, 8), "token_ids": torch.tensor(tokens)}, path)
    os.close(fd)


@pytest.mark.parametrize("patched", [False, True], ids=["left-out", "applied"])
def test_client_lock_wait(tmp_path, patched):
    pid = "speculators.serve.client_lock_wait"
    client = load("speculators==0.5.0", "speculators/data_generation/vllm_client.py", pid if patched else None, "no")
    tokens = [1, 2, 3]
    path = str(tmp_path / "req-1.safetensors")
    started = threading.Event()
    writer = threading.Thread(target=slow_writer, args=(path, tokens, started, 1.0))
    writer.start()
    started.wait(5)
    completion = types.SimpleNamespace(choices=[types.SimpleNamespace(prompt_token_ids=tokens)],
                                       kv_transfer_params={"hidden_states_path": path})
    returned = client.extract_output(completion, tokens)
    ready = os.path.exists(path)
    writer.join()
    assert returned == path
    if not patched:
        assert not ready  # the 0.5.0 script would now move a file that is not there yet
        return
    assert ready and safetensors_torch.load_file(path)["hidden_states"].shape == (3, 2, 8)


@pytest.mark.parametrize("patched", [False, True], ids=["left-out", "applied"])
def test_third_party_connector_layout(patched, monkeypatch):
    """hs-connectors 0.7.0's Mooncake connector on vLLM >= 0.29's [blocks, ids, block_size, hidden] view."""
    pytest.importorskip("vllm")
    from compat.astkit import Reader
    from compat.probes import PROBES

    vllm_axis = PROBES["serve.connector.index_axis"].run(Reader(_installed("vllm"))).value
    if vllm_axis != "shape[2]":
        pytest.skip(f"needs vLLM >= 0.29 (this interpreter's connector reads {vllm_axis})")
    requirement, relpath = "hs-connectors==0.7.0", "hs_connectors/mooncake_hidden_states_connector.py"
    monkeypatch.syspath_prepend(str(wheel(requirement)))  # its sibling modules import from the zip
    text = WheelSource(wheel(requirement)).read(relpath)
    if patched:
        for edit in PATCHES["hs_connectors.serve.kv_layout"].edits["shape[1]"][relpath]:
            text = edit.apply(text, relpath)
    module = types.ModuleType("hs_connectors.mooncake_hidden_states_connector")
    module.__package__ = "hs_connectors"
    monkeypatch.setitem(__import__("sys").modules, module.__name__, module)
    exec(compile(text, relpath, "exec"), module.__dict__)
    blocks, ids, block_size, hidden = 64, 3, 16, 8
    kv = torch.randn(blocks, ids, block_size, hidden)
    slots = torch.tensor([2 * block_size, 2 * block_size + 1, 5 * block_size + 3])
    truth = torch.stack([kv[2, :, 0], kv[2, :, 1], kv[5, :, 3]])  # [T, N, H]
    got = module.extract_from_kv_cache(kv, slots, 3)
    layout = module.MooncakeHiddenStatesConnector.get_required_kvcache_layout(None)
    if not patched:
        assert got.shape != truth.shape and layout == "NHD"  # wrong slots, wrong shape in dim 1, silently
        return
    assert torch.equal(got, truth) and layout == "LBNHC"


def _installed(module: str):
    from compat.surface import installed_sources

    return installed_sources()[module][1]
