from compat.declaration import Patch, insert_after

from ._fence import MODERN, fenced

ID = "vllm.serve.tp_page_size"
KV_UTILS = "vllm/v1/core/kv_cache_utils.py"

PATCH = Patch(
    id=ID,
    title="vLLM 0.22-0.29 with TP >= 2: grow the common KV page to hold one token of hidden states",
    why=(
        "From 0.22 the hidden-state layer gets its own group, padded to the common page of the verifier's KV "
        "groups. Tensor parallelism shrinks that page (fewer KV heads per rank) while the hidden-state cost per "
        "token (ids x hidden x dtype) stays whole, so the page falls below one token and startup fails "
        "'assert page_size_padded >= real_page_size' (vllm#51016, reported on 0.25.1 and 0.26.0)."
    ),
    how="Before the hidden-state layers are re-added, scale every group's block size (and padded page) by "
        "ceil(per_token / common_page) when one token does not fit: vLLM 0.30's _ensure_min_page_size, inlined.",
    upstream="vllm-project/vllm#50894 (in 0.30.0), fixes #51016",
    removal="when vLLM < 0.30 is no longer supported on the modern path",
    target="vllm",
    versions={"vllm": ">=0.22,<0.30", "speculators": MODERN},
    requires={"serve.kv.hidden_state_pages": ("aligned",)},
    variant_probe="serve.kv.min_page_size",
    symptom="page_size_padded >= real_page_size",
    edits={
        "absent": {
            KV_UTILS: (
                insert_after(
                    "        common_page = get_uniform_page_size([g.kv_cache_spec for g in groups])\n",
                    fenced(ID, (
                        "        _per_token = max(s.num_kv_heads * s.head_size * get_dtype_size(s.dtype)\n"
                        "                         for s in hidden_specs.values())\n"
                        "        if _per_token > common_page:  # TP shrank the page below one hidden-state token\n"
                        "            _scale = -(-_per_token // common_page)\n"
                        "            common_page *= _scale\n"
                        "            _scaled = []\n"
                        "            for _g in groups:\n"
                        "                _s = _g.kv_cache_spec\n"
                        "                _kw = {\"block_size\": _s.block_size * _scale}\n"
                        "                if getattr(_s, \"page_size_padded\", None) is not None:\n"
                        "                    _kw[\"page_size_padded\"] = _s.page_size_padded * _scale\n"
                        "                _scaled.append(KVCacheGroupSpec(_g.layer_names, replace(_s, **_kw)))\n"
                        "            groups = _scaled\n"
                    ), "        "),
                ),
            )
        }
    },
)
