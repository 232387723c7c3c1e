"""What ``--reference self``'s recompute reads of Kimi-K2.5, from its published shapes: the whole chain, once.

    python benchmarks/self_reference_kimi_plan.py [--ids 2,30,58,61]

Why this exists: the recompute walks every decoder layer from the embedding to the last captured id, each layer's
weights read once, so its cost at Kimi-K2.5's scale is a count of bytes -- and of how much one layer takes in memory
once its INT4 experts are dequantized -- that no tiny fixture shows.  No checkpoint is needed: a ``WeightIndex``
is filled with the tensor names and byte sizes Kimi-K2.5's safetensors hold (moonshotai/Kimi-K2.5 ``text_config``:
61 layers, the first dense, 384 routed experts of width 2048 in INT4 pack-quantized group 32 with bf16 scales, one
shared expert, MLA with q_lora 1536 / kv_lora 512, 64 heads, vocabulary 163840, bf16 elsewhere; the vision tower
is not counted), and the steps are ``compat.serve.recompute.steps`` -- the code confirm runs.

Prints the ids captured, each step with its layers and bytes, the bytes the chain reads (the embedding and every
layer up to the last id) and with the final norm and head the logits part reads, as shares of the text weights;
then memory: the largest layer packed, the same layer dequantized to float32 (what the recompute's arithmetic
holds on its device), and the embedding table as float32 (looked up on the CPU).  Prints, never asserts; the first
line names the commit, and whether the files that decide these figures differ from it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.serve import recompute  # noqa: E402

KIMI = dict(layers=61, dense=1, hidden=7168, intermediate=18432, experts=384, expert_width=2048, shared=1,
            q_lora=1536, kv_lora=512, rope=64, nope=128, v=128, heads=64, vocab=163840, group=32)
#: the files whose content decides what this prints
DECIDING = ("benchmarks/self_reference_kimi_plan.py", "compat/serve/recompute.py", "compat/serve/layers.py")
GB = 1e9


def kimi_index(c=KIMI) -> tuple[recompute.WeightIndex, dict]:
    """The checkpoint's text tensors as bytes on disk, and ``{name: elements}`` of each weight as the recompute
    holds it (an INT4 weight's packed tensor, scale and shape stand for one rows x cols matrix)."""
    sizes, elements = {}, {}

    def bf16(name, *shape):
        n = 1
        for d in shape:
            n *= d
        sizes[name] = 2 * n
        elements[name] = n

    def int4(prefix, rows, cols):
        sizes[prefix + "weight_packed"] = rows * cols // 8 * 4
        sizes[prefix + "weight_scale"] = rows * (cols // c["group"]) * 2
        sizes[prefix + "weight_shape"] = 2 * 4
        elements[prefix + "weight"] = rows * cols

    h = c["hidden"]
    bf16("language_model.model.embed_tokens.weight", c["vocab"], h)
    bf16("language_model.lm_head.weight", c["vocab"], h)
    bf16("language_model.model.norm.weight", h)
    for i in range(c["layers"]):
        p = f"language_model.model.layers.{i}."
        bf16(p + "input_layernorm.weight", h)
        bf16(p + "post_attention_layernorm.weight", h)
        bf16(p + "self_attn.q_a_proj.weight", c["q_lora"], h)
        bf16(p + "self_attn.q_a_layernorm.weight", c["q_lora"])
        bf16(p + "self_attn.q_b_proj.weight", c["heads"] * (c["nope"] + c["rope"]), c["q_lora"])
        bf16(p + "self_attn.kv_a_proj_with_mqa.weight", c["kv_lora"] + c["rope"], h)
        bf16(p + "self_attn.kv_a_layernorm.weight", c["kv_lora"])
        bf16(p + "self_attn.kv_b_proj.weight", c["heads"] * (c["nope"] + c["v"]), c["kv_lora"])
        bf16(p + "self_attn.o_proj.weight", h, c["heads"] * c["v"])
        if i < c["dense"]:
            for proj, shape in (("gate_proj", (c["intermediate"], h)), ("up_proj", (c["intermediate"], h)),
                                ("down_proj", (h, c["intermediate"]))):
                bf16(p + f"mlp.{proj}.weight", *shape)
            continue
        bf16(p + "mlp.gate.weight", c["experts"], h)
        sizes[p + "mlp.gate.e_score_correction_bias"] = c["experts"] * 4
        elements[p + "mlp.gate.e_score_correction_bias"] = c["experts"]
        width = c["expert_width"] * c["shared"]
        bf16(p + "mlp.shared_experts.gate_proj.weight", width, h)
        bf16(p + "mlp.shared_experts.up_proj.weight", width, h)
        bf16(p + "mlp.shared_experts.down_proj.weight", h, width)
        for e in range(c["experts"]):
            int4(p + f"mlp.experts.{e}.gate_proj.", c["expert_width"], h)
            int4(p + f"mlp.experts.{e}.up_proj.", c["expert_width"], h)
            int4(p + f"mlp.experts.{e}.down_proj.", h, c["expert_width"])
    index = recompute.WeightIndex("Kimi-K2.5 (published shapes)", files={n: None for n in sizes}, sizes=sizes)
    return index, elements


def provenance() -> str:
    """The commit, and which of the files deciding these figures differ from it (so the output says what it ran)."""
    def git(*argv):
        return subprocess.run(["git", *argv], capture_output=True, text=True, cwd=ROOT).stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", *DECIDING).splitlines()
    state = f"modified: {', '.join(line[3:] for line in changed)}" if changed else "these files as committed: " + \
        ", ".join(DECIDING)
    return f"commit {git('rev-parse', '--short', 'HEAD')} ({state})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", default="2,30,58,61",
                        help="the ids asked for (default: speculators' [2, L//2, L-3, L])")
    args = parser.parse_args()
    index, elements = kimi_index()
    total = index.total_bytes
    depth = KIMI["layers"]
    print(f"# python benchmarks/self_reference_kimi_plan.py --ids {args.ids}; {provenance()}; no checkpoint and no "
          f"device: Kimi-K2.5's published shapes, compat.serve.recompute.steps; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"Kimi-K2.5 text weights: {total / GB:.1f} GB; {depth} layers; MoE layer {index.layer_bytes(1) / GB:.2f} GB, "
          f"dense layer {index.layer_bytes(0) / GB:.2f} GB")
    ids = recompute.self_ids([int(x) for x in args.ids.split(",")], depth)
    print(f"ids asked {args.ids}; captured by --reference self: {ids}")
    chain = recompute.steps(ids)
    embed = index.sizes["language_model.model.embed_tokens.weight"]
    for step in chain:
        layers = (f"{len(step.layers)} layers ({step.layers[0]}-{step.layers[-1]})" if len(step.layers) > 1
                  else f"1 layer ({step.layers[0]})")
        print(f"  step {step.name}: {layers}, "
              f"{sum(index.layer_bytes(i) for i in step.layers) / GB:.2f} GB")
    run = sorted({i for step in chain for i in step.layers})
    layer_bytes = sum(index.layer_bytes(i) for i in run)
    read = embed + layer_bytes
    head = index.sizes["language_model.lm_head.weight"] + index.sizes["language_model.model.norm.weight"]
    print(f"the chain reads each of {len(run)} layers once ({layer_bytes / GB:.1f} GB) and the embedding "
          f"({embed / GB:.2f} GB): {read / GB:.1f} GB ({read / total:.1%} of the text weights); with the logits "
          f"part's final norm and head ({head / GB:.2f} GB) {(read + head) / GB:.1f} GB ({(read + head) / total:.1%})")
    widest = max(run, key=index.layer_bytes)
    prefix = f".layers.{widest}."
    dequantized = 4 * sum(n for name, n in elements.items() if prefix in name)
    print(f"memory: one layer at a time; the largest, layer {widest}, is {index.layer_bytes(widest) / GB:.2f} GB "
          f"packed and {dequantized / GB:.1f} GB dequantized to float32 on the recompute's device; the embedding "
          f"table as float32 on the CPU {4 * elements['language_model.model.embed_tokens.weight'] / GB:.2f} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
