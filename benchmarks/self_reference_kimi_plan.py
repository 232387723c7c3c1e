"""What ``--reference self`` reads of Kimi-K2.5, from its published shapes: the ids captured and the steps run.

    python benchmarks/self_reference_kimi_plan.py [--ids 2,30,58,61] [--share 0.1]

No checkpoint is needed: a ``WeightIndex`` is filled with the tensor names and byte sizes Kimi-K2.5's safetensors
hold (moonshotai/Kimi-K2.5 ``text_config``: 61 layers, the first dense, 384 routed experts of width 2048 in INT4
pack-quantized group 32 with bf16 scales, one shared expert, MLA with q_lora 1536 / kv_lora 512, 64 heads,
vocabulary 163840, bf16 elsewhere; the vision tower is not counted), and ``compat.serve.recompute.plan`` -- the code
confirm runs -- picks the steps within the budget.  Prints the ids captured, each step with its layers and bytes,
the steps over budget, and the share of the checkpoint read (recompute, plus the final norm and the head that the
logits part reads).  Prints, never asserts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compat.serve import recompute  # noqa: E402

KIMI = dict(layers=61, dense=1, hidden=7168, intermediate=18432, experts=384, expert_width=2048, shared=1,
            q_lora=1536, kv_lora=512, rope=64, nope=128, v=128, heads=64, vocab=163840, group=32)


def kimi_index(c=KIMI) -> recompute.WeightIndex:
    sizes = {}

    def bf16(name, *shape):
        n = 2
        for d in shape:
            n *= d
        sizes[name] = n

    def int4(prefix, rows, cols):
        sizes[prefix + "weight_packed"] = rows * cols // 8 * 4
        sizes[prefix + "weight_scale"] = rows * (cols // c["group"]) * 2
        sizes[prefix + "weight_shape"] = 2 * 4

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
        width = c["expert_width"] * c["shared"]
        bf16(p + "mlp.shared_experts.gate_proj.weight", width, h)
        bf16(p + "mlp.shared_experts.up_proj.weight", width, h)
        bf16(p + "mlp.shared_experts.down_proj.weight", h, width)
        for e in range(c["experts"]):
            int4(p + f"mlp.experts.{e}.gate_proj.", c["expert_width"], h)
            int4(p + f"mlp.experts.{e}.up_proj.", c["expert_width"], h)
            int4(p + f"mlp.experts.{e}.down_proj.", h, c["expert_width"])
    return recompute.WeightIndex("Kimi-K2.5 (published shapes)", files={n: None for n in sizes}, sizes=sizes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", default="2,30,58,61",
                        help="the ids asked for (default: speculators' [2, L//2, L-3, L])")
    parser.add_argument("--share", type=float, default=recompute.BUDGET_SHARE)
    args = parser.parse_args()
    index = kimi_index()
    total = index.total_bytes
    ids = recompute.self_ids([int(x) for x in args.ids.split(",")], KIMI["layers"])
    chosen, over = recompute.plan(index, ids, int(args.share * total))
    gb = 1e9
    print(f"Kimi-K2.5 text weights: {total / gb:.1f} GB; MoE layer {index.layer_bytes(1) / gb:.2f} GB, dense layer "
          f"{index.layer_bytes(0) / gb:.2f} GB; budget {args.share:g} x checkpoint = {args.share * total / gb:.1f} GB")
    print(f"ids asked {args.ids}; captured by --reference self: {ids}")
    spent = 0
    for step in chosen:
        spent += step.bytes
        print(f"  run  {'embedding' if step.start < 0 else step.start}->{step.end}: layers {list(step.layers)}, "
              f"{step.bytes / gb:.2f} GB")
    for step in over:
        print(f"  over budget  {step.start}->{step.end}: {len(step.layers)} layers, {step.bytes / gb:.2f} GB")
    head = index.sizes["language_model.lm_head.weight"] + index.sizes["language_model.model.norm.weight"]
    print(f"recompute reads {spent / gb:.1f} GB ({spent / total:.1%}); with the logits part's norm and head "
          f"{(spent + head) / gb:.1f} GB ({(spent + head) / total:.1%} of the checkpoint)")
    widest = max(index.layer_bytes(i) for i in range(KIMI["layers"]))
    float32 = sum(v for k, v in index.sizes.items() if ".layers.1." in k and "weight_packed" not in k) * 2 + \
        KIMI["experts"] * 3 * KIMI["expert_width"] * KIMI["hidden"] * 4
    print(f"memory: one layer at a time; the widest read is {widest / gb:.2f} GB packed, {float32 / gb:.1f} GB "
          "once dequantized to float32 (the recompute's arithmetic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
