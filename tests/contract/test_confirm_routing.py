"""MoE routing margins (compat.shared.routing) and the routing-tie rule of compare, on real torch and
transformers (a contract test: the lanes have them; the unit venv has neither).

The oracle is Hugging Face's own DeepSeek-V3 router: a margin is right when moving the selection scores by less
than half of it never changes HF's choice and moving them by a little more than half of it does.  The rule's
calibration is the H200 record itself (docs/gpu/records_moe.json), judged again by ci.gpu.record.
"""

from __future__ import annotations

import pytest
from types import SimpleNamespace

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3",
                    reason="this transformers has no DeepSeek-V3 (the router whose margins are read)")

from compat.confirm import compare as cmp  # noqa: E402
from compat.shared import routing  # noqa: E402
from compat.shared.tolerance import routing_tie  # noqa: E402

def _router(experts=8, top_k=2, seed=0):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    config = DeepseekV3Config(hidden_size=32, n_routed_experts=experts, num_experts_per_tok=top_k, n_group=1,
                              topk_group=1, norm_topk_prob=True)
    torch.manual_seed(seed)
    router = DeepseekV3TopkRouter(config)
    with torch.no_grad():
        router.weight.normal_(0, 0.3)
        router.e_score_correction_bias.uniform_(0, 0.5)
    return router

def _chosen(router, hidden) -> set:
    """HF's own choice of experts.  transformers 5.15+ (and 4.x) routers choose and return the indices last; 5.5-5.14
    ones return the logits only and their MoE block chooses (DeepseekV3MoE.route_tokens_to_experts)."""
    with torch.no_grad():
        out = router(hidden)
        if isinstance(out, tuple):
            return set(out[-1].flatten().tolist())
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

        block = DeepseekV3MoE(router.config)
        block.gate = router
        return set(block.route_tokens_to_experts(out)[0].flatten().tolist())


def _top_k(router) -> int:
    """k as HF reads it: the router's own attribute, or (transformers 5.5-5.14) its config's."""
    return getattr(router, "top_k", None) or router.config.num_experts_per_tok

def test_a_margin_is_the_distance_to_another_hf_routing_choice():
    router = _router()
    hidden = torch.randn(48, 32)
    margins = routing.margins(router, hidden)
    assert margins.shape == (48,) and bool((margins >= 0).all())
    for token in range(48):
        x = hidden[token:token + 1]
        before = _chosen(router, x)
        logits = torch.nn.functional.linear(x.float(), router.weight.float())
        scores = (logits.sigmoid() + router.e_score_correction_bias)[0]
        order = scores.argsort(descending=True).tolist()
        kth, next_best = order[_top_k(router) - 1], order[_top_k(router)]
        half = float(margins[token]) / 2
        for push, flips in ((half * 0.9, False), (half * 1.1 + 1e-6, True)):
            moved = _router()
            with torch.no_grad():
                moved.e_score_correction_bias[next_best] += push
                moved.e_score_correction_bias[kth] -= push
            assert (_chosen(moved, x) != before) is flips, (token, push, float(margins[token]))

def test_the_recorder_reads_every_router_of_a_deepseek_v3_model_per_forward():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                              num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16,
                              kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                              n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1,
                              topk_group=1)
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(config).eval()
    recorder = routing.MarginRecorder(model)
    with torch.no_grad():
        model(torch.tensor([[1, 5, 9, 12, 30]]))
    seen = recorder.take()
    recorder.remove()
    assert sorted(seen) == [1, 2]  # layer 0 is dense (first_k_dense_replace=1)
    assert all(m.shape == (5,) for m in seen.values())
    assert routing.min_margin_upto(seen, 0, 3) is None
    assert routing.min_margin_upto(seen, 2, 3) == min(float(seen[1][3]), float(seen[2][3]))

def _call(margin: float, off_row: int = 3, off_rows: int = 1, tokens: int = 40):
    """One result whose rows ``off_row ..`` (``off_rows`` of them) are O(1) off, a reference whose router margin
    there is ``margin``; 40 tokens, so one row is 2.5 % of the layer (under EXCUSE_CEILING)."""
    torch.manual_seed(1)
    ref = torch.randn(tokens, 8)
    got = ref.clone()
    got[off_row:off_row + off_rows] += 3.0
    margins = torch.full((tokens,), 0.5)
    margins[off_row:off_row + off_rows] = margin
    prompt = list(range(5, 5 + tokens))
    reference = cmp.RoutedReference(None, {tuple(prompt): [ref]}, 4, {tuple(prompt): {1: margins}})
    results = [{"input_ids": prompt, "hidden_states": [got]}]
    return cmp.compare(results, [prompt], reference, [2], rtol=0.2, hidden_size=8, tie=routing_tie("bfloat16"))

def test_a_row_off_at_a_routing_tie_is_a_note_not_a_problem():
    found = _call(margin=1e-4)
    assert found["problems"] == []
    assert "routing flips" in found["notes"][0]
    assert found["layers"][2]["rows_over"] == 1 and found["layers"][2]["rows_over_untied"] == 0

def test_tied_rows_past_the_ceiling_are_not_set_aside():
    """4 of 40 rows (10 %) off at a tie: more than EXCUSE_CEILING (5 %) of the layer; the layer is not vouched for
    (not looked at: INCOMPLETE, never OK, and not WRONG either: no row differed where the routing was decisive)."""
    from compat.shared.tolerance import EXCUSE_CEILING

    found = _call(margin=1e-4, off_rows=4)
    assert 4 / 40 > EXCUSE_CEILING and found["notes"] == [] and found["problems"] == [], found
    assert len(found["not_looked_at"]) == 1 and "ceiling" in found["not_looked_at"][0], found
    assert "4 of 40 rows" in found["not_looked_at"][0]
    within = _call(margin=1e-4, off_rows=2)  # 5 %: within the ceiling, a note
    assert within["problems"] == [] and within["not_looked_at"] == [] and within["notes"]


def test_a_row_off_where_the_routing_was_decisive_is_wrong():
    found = _call(margin=0.3)
    assert found["notes"] == [] and len(found["problems"]) == 1
    assert found["layers"][2]["worst_rows"][0]["token"] == 3

def test_without_routing_margins_the_max_element_rule_stands():
    torch.manual_seed(1)
    ref = torch.randn(6, 8)
    got = ref.clone()
    got[3] += 3.0
    prompt = [5, 6, 7, 8, 9, 10]
    found = cmp.compare([{"input_ids": prompt, "hidden_states": [got]}], [prompt],
                        cmp.Reference(None, {tuple(prompt): [ref]}, 4), [2], rtol=0.2, hidden_size=8,
                        tie=routing_tie("bfloat16"))
    assert len(found["problems"]) == 1 and found["notes"] == []


def test_the_serve_path_leaves_tied_rows_unjudged_and_judges_the_rest():
    """Modern-path id k enters layer k: only the routers of layers < k can excuse its rows."""
    from compat.serve.checks import untied_row_errors

    torch.manual_seed(2)
    ref = torch.randn(5, 2, 8)  # [T, ids, H] for ids [1, 3]
    got = ref.clone()
    got[2, 1] += 3.0  # token 2, id 3: off by O(1)
    margins = {1: torch.tensor([0.5, 0.5, 1e-4, 0.5, 0.5]), 2: torch.full((5,), 0.5)}
    tie = routing_tie("bfloat16")
    worst, excused = untied_row_errors(got, ref, [1, 3], margins, tie, 0.2)
    assert excused == {3: 1} and worst[3] == 0.0  # the router of layer 1 was tied for token 2: not judged
    worst, excused = untied_row_errors(got, ref, [1, 3], {2: torch.full((5,), 0.5)}, tie, 0.2)
    assert excused == {} and worst[3] > 1.0  # decisive routing: judged, and far over any bound
    got2 = ref.clone()
    got2[2, 0] += 3.0  # id 1 enters layer 1: layer 1's own router did not decide it
    worst, excused = untied_row_errors(got2, ref, [1, 3], margins, tie, 0.2)
    assert excused.get(1) is None and worst[1] > 1.0
    tied_within = ref.clone()
    tied_within[2, 1] += 1e-3  # a tied row within the bound is judged (and passes), not set aside
    worst, excused = untied_row_errors(tied_within, ref, [1, 3], margins, tie, 0.2)
    assert excused == {} and 0 < worst[3] < 0.2


def test_a_router_that_keeps_only_its_config_is_read_from_it():
    """transformers 5.8's DeepseekV3TopkRouter has no top_k attribute: k, groups and kept groups come from its config
    (it failed test_k4_proof on lane serve-021 with AttributeError); one whose k cannot be read gives no margin."""
    router = _router()
    hidden = torch.randn(16, 32)
    want = routing.margins(router, hidden)


    bare = _router()
    bare.config = SimpleNamespace(num_experts_per_tok=2, n_group=1, topk_group=1)  # as transformers 5.8 keeps it
    for name in ("top_k", "num_group", "topk_group"):
        if hasattr(bare, name):
            delattr(bare, name)
    assert torch.equal(routing.margins(bare, hidden), want)
    bare.config = None
    assert routing.margins(bare, hidden) is None


def test_the_old_path_verdict_is_incomplete_when_a_layer_was_not_vouched_for():
    """compare's not_looked_at reaches the report: nothing differed, a layer was not looked at enough -> INCOMPLETE,
    exit 4, named on the first screen; a problem elsewhere still makes it WRONG."""
    from compat.confirm import report, runner

    found = _call(margin=1e-4, off_rows=4)
    call = {"n": 1, "problems": found["problems"], "not_looked_at": found["not_looked_at"], "layers": found["layers"]}
    doc = runner.decide({"ok": True, "error": None, "calls": [call]})
    assert doc["verdict"] == "INCOMPLETE" and report.exit_code(doc) == 4, doc
    assert "ceiling" in doc["not_looked_at"][0]
    doc = runner.decide({"ok": False, "error": None, "calls": [call]})
    assert doc["verdict"] == "WRONG" and report.exit_code(doc) == 1
    assert runner.decide({"ok": True, "error": None, "calls": [{"not_looked_at": []}]})["verdict"] == "OK"
