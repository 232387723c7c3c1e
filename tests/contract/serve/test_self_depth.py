"""``--reference self`` at Kimi-K2.5's depth: a 61-layer tiny Kimi-K2.5 (MLA, MoE, the kimi_k25 wrapper) with the
ids a user captures for speculators' default (2, 30, 58, 61 and, for self, each id's next: 2,3,30,31,58,59,61).

No server: the right files are HF float32's rows (id k = ``hidden_states[k]``, id 61 = the final norm's input),
and the server's logprobs are HF's own (every prompt position and the first generated token's).  Each fault of the
corpus is written into the files the way a capture bug writes it and fed to ``compat.serve.runner.check_files``
with every part of ``--reference self`` on.  Expected verdicts are reasoned from the layer semantics, never read
from the code under test: every fault is WRONG (or INCOMPLETE where a part cannot run), never OK; right files OK.

Why these faults: at 61 layers a budget that recomputes only some steps leaves holes (3->30, 31->58, 59->61), and a
decoder layer maps zeros to zeros, so a zeroed *pair* of ids passes the one-layer step between them; the final id
is compared only by the logits, which never looked at the last position.
"""

from __future__ import annotations

import shutil

import pytest

from . import records
from .conftest import model_dir

pytestmark = [pytest.mark.serve]

DEPTH = 61
IDS = [2, 3, 30, 31, 58, 59, 61]
LENGTHS = (3, 17, 40, 90)
#: fault -> the verdict of ``--reference self`` (files, logprobs, twin, recompute) on it
EXPECTED = {
    "none": "OK",
    "final id x3": "WRONG",
    "ids 30 and 31 zeroed": "WRONG",
    "ids 58 and 59 zeroed": "WRONG",
    "last position's final row zeroed": "WRONG",
    "id 59 from another prompt": "WRONG",
}


@pytest.fixture(scope="module", autouse=True)
def newest_serve_lane():
    records.only_in_newest_serve_lane("the depth corpus (no server)")


@pytest.fixture(scope="module")
def truth():
    """(model, prompts, right files, the server's answers) of the 61-layer tiny Kimi-K2.5, from HF float32."""
    import random

    import torch

    from compat.serve import reference
    from fixtures.tiny_mla import build_tiny_kimi_k25

    model = build_tiny_kimi_k25(model_dir("serve-tiny-kimi-61"), text_overrides={"num_hidden_layers": DEPTH})
    rng = random.Random(61)
    prompts = [[rng.randrange(4, 512) for _ in range(n)] for n in LENGTHS]
    rows = reference.hf_rows(model, prompts, IDS)
    hf, _ = reference.load_hf(model)
    served = {}
    with torch.no_grad():
        for prompt in prompts:
            logits = hf(input_ids=torch.tensor([prompt])).logits[0].float()
            logprobs = torch.log_softmax(logits, -1)
            entries = [None] + [top_k(logprobs[t - 1], prompt[t]) for t in range(1, len(prompt))]
            last = top_k(logprobs[-1], None)
            served[tuple(prompt)] = {"logprobs": entries, "next": {int(k): v["logprob"] for k, v in last.items()}}
    files = [(p, {"hidden_states": rows[tuple(p)].clone(), "token_ids": torch.tensor(p)}) for p in prompts]
    return model, prompts, files, served


def top_k(logprobs, token, k: int = 5) -> dict:
    """The server's entry for one position: its top-k and the prompt token, keyed by token id."""
    import torch

    ids = set(torch.topk(logprobs, k).indices.tolist()) | ({token} if token is not None else set())
    return {str(t): {"logprob": float(logprobs[t])} for t in ids}


def inject(fault: str, files):
    out = [(p, {"hidden_states": d["hidden_states"].clone(), "token_ids": d["token_ids"].clone()}) for p, d in files]
    at = {k: i for i, k in enumerate(IDS)}
    for index, (_, data) in enumerate(out):
        states = data["hidden_states"]
        if fault == "final id x3":
            states[:, at[61]] *= 3
        elif fault == "ids 30 and 31 zeroed":
            states[:, at[30]] = 0
            states[:, at[31]] = 0
        elif fault == "ids 58 and 59 zeroed":
            states[:, at[58]] = 0
            states[:, at[59]] = 0
        elif fault == "last position's final row zeroed":
            states[-1, at[61]] = 0
        elif fault == "id 59 from another prompt" and index == 3:  # the two longest prompts' rows crossed
            other = files[2][1]["hidden_states"]
            states[: len(other), at[59]] = other[:, at[59]]
    return out


def verdict(model, prompts, files, served, tmp_path, ids=IDS, **spec_options):
    from compat.serve import ServeSpec
    from compat.serve.runner import ServeResult, check_files

    spec = ServeSpec(model=model, work_dir=tmp_path, calls=[prompts], layer_ids=ids, device="cpu",
                     **{**dict(hf_check=False, logprobs_check=True, twin_check=False, recompute_check=True),
                        **spec_options})
    return check_files(ServeResult("OK", ""), spec, files, served)


@pytest.mark.parametrize("fault", list(EXPECTED))
def test_every_fault_at_depth_is_caught_and_right_files_are_ok(truth, fault, tmp_path):
    model, prompts, files, served = truth
    result = verdict(model, prompts, inject(fault, files), served, tmp_path)
    recompute = result.checks["recompute"]
    print(fault, result.verdict, result.reason, recompute.get("worst"), result.checks["logprobs"])
    records.save("depth-fault-" + fault.replace(" ", "-").replace("'", ""),
                 {"suite": "tests/contract/serve/test_self_depth.py", "depth": DEPTH, "ids": IDS, "fault": fault,
                  "verdict": result.verdict, "checks": result.checks})
    assert result.verdict == EXPECTED[fault], (result.reason, result.checks)
    # every step of the chain ran: the embedding to the first id and each id to the next, all 61 layers
    assert recompute["steps"] == ["embedding->2", "2->3", "3->30", "30->31", "31->58", "58->59", "59->61"]
    assert recompute["layers_run"] == DEPTH and recompute["files"] == f"{len(files)} of {len(files)}"


def test_the_last_position_is_compared_by_the_logits(truth, tmp_path):
    """The last prompt position's final row is seen by the first generated token's logprobs: the logits check
    alone (no recompute) fails when only that row is zeroed, and compares one more position per file."""
    model, prompts, files, served = truth
    result = verdict(model, prompts, inject("last position's final row zeroed", files), served, tmp_path,
                     recompute_check=False)
    assert result.verdict == "WRONG" and result.checks["logprobs"]["ok"] is False, result.checks
    assert result.checks["logprobs"]["last_position_files"] == len(files)
    without_next = {p: {"logprobs": a["logprobs"]} for p, a in served.items()}
    result = verdict(model, prompts, files, without_next, tmp_path, recompute_check=False)
    assert result.verdict == "INCOMPLETE" and "last position" in result.reason, result.reason


def test_the_final_id_alone_is_recomputed_through_all_61_layers(truth, tmp_path):
    """``--layers 61``: one step, the embedding through every layer; right OK, the final id x3 WRONG."""
    import torch

    model, prompts, files, served = truth
    final = [(p, {"hidden_states": d["hidden_states"][:, -1:].contiguous(), "token_ids": d["token_ids"]})
             for p, d in files]
    result = verdict(model, prompts, final, served, tmp_path, ids=[61])
    assert result.verdict == "OK", (result.reason, result.checks)
    assert result.checks["recompute"]["steps"] == ["embedding->61"]
    assert result.checks["recompute"]["layers_run"] == DEPTH
    for _, data in final:
        data["hidden_states"] = data["hidden_states"] * torch.tensor(3.0)
    assert verdict(model, prompts, final, served, tmp_path, ids=[61]).verdict == "WRONG"


def test_a_part_that_cannot_run_is_incomplete_never_ok(truth, tmp_path):
    """A checkpoint whose layers cannot be rebuilt here (a quantization the recompute does not read) and a norm the
    logits check does not know: each part says what it did not look at, and the verdict is INCOMPLETE, exit 4."""
    import json
    from pathlib import Path

    from compat.serve.runner import EXIT_CODES

    model, prompts, files, served = truth
    unknown = tmp_path / "unknown-quant"
    shutil.copytree(model, unknown)
    config = json.loads((unknown / "config.json").read_text())
    config["text_config"]["quantization_config"] = {"quant_method": "made_up", "format": "made-up"}
    (unknown / "config.json").write_text(json.dumps(config))
    result = verdict(str(unknown), prompts, files, served, tmp_path)
    assert result.verdict == "INCOMPLETE", (result.reason, result.checks)
    assert "recompute" in result.reason and "made_up" in result.reason, result.reason
    assert EXIT_CODES[result.verdict] == 4
    # a fault stays WRONG when another part could not run: WRONG needs a failed comparison, and the logits saw one
    result = verdict(str(unknown), prompts, inject("final id x3", files), served, tmp_path)
    assert result.verdict == "INCOMPLETE"  # x3 of the final row is invisible to the logits (RMSNorm): not OK
    result = verdict(str(unknown), prompts, inject("last position's final row zeroed", files), served, tmp_path)
    assert result.verdict == "WRONG", result.reason
    norm = tmp_path / "unknown-norm"
    shutil.copytree(model, norm)
    config = json.loads((norm / "config.json").read_text())
    config["text_config"]["final_logit_softcapping"] = 30.0
    (norm / "config.json").write_text(json.dumps(config))
    result = verdict(str(norm), prompts, files, served, tmp_path)
    assert result.verdict == "INCOMPLETE" and "logprobs" in result.reason, result.reason
    assert Path(model, "config.json").is_file()


def test_inv_freq_tensors_in_the_checkpoint_are_read_as_vllm_reads_them(truth, tmp_path):
    """Older exporters wrote each layer's ``self_attn.rotary_emb.inv_freq``; vLLM ignores them on load.  The
    recompute does too: right files OK, a fault WRONG (before, the recompute could not load such a layer and
    passed without looking)."""
    from safetensors.torch import load_file, save_file

    model, prompts, files, served = truth
    copy = tmp_path / "inv-freq"
    shutil.copytree(model, copy)
    for file in sorted(copy.glob("*.safetensors")):
        tensors = load_file(str(file))
        layers = sorted({n.split(".layers.")[0] + ".layers." + n.split(".layers.")[1].split(".")[0]
                         for n in tensors if ".layers." in n and "vision" not in n})
        import torch

        for prefix in layers:
            tensors[f"{prefix}.self_attn.rotary_emb.inv_freq"] = torch.ones(32)
        save_file(tensors, str(file), metadata={"format": "pt"})
    result = verdict(str(copy), prompts, files, served, tmp_path)
    assert result.verdict == "OK", (result.reason, result.checks.get("recompute"))
    assert verdict(str(copy), prompts, inject("ids 30 and 31 zeroed", files), served, tmp_path).verdict == "WRONG"


def test_a_binding_token_budget_samples_files_never_steps(truth, tmp_path, monkeypatch):
    """Under a token budget smaller than the files, every step and all 61 layers still run; the files recomputed are
    a sample that holds the longest one, every position of each, and the report says so."""
    from compat.serve import recompute

    model, prompts, files, served = truth
    monkeypatch.setattr(recompute, "TOKEN_BUDGET", max(LENGTHS) + 5)
    result = verdict(model, prompts, files, served, tmp_path)
    check = result.checks["recompute"]
    assert result.verdict == "OK", (result.reason, check)
    assert check["steps"] == ["embedding->2", "2->3", "3->30", "30->31", "31->58", "58->59", "59->61"]
    assert check["layers_run"] == DEPTH and check["files"] == f"2 of {len(files)}", check  # 90, then the 3-token one
    assert "longest included" in check["sampled"] and check["tokens"] == max(LENGTHS) + min(LENGTHS), check
    wrong = verdict(model, prompts, inject("id 59 from another prompt", files), served, tmp_path)  # in the longest
    assert wrong.verdict == "WRONG" and "58->59" in wrong.checks["recompute"]["failed_comparisons"], wrong.checks
