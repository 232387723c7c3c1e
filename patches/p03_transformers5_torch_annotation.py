from compat.declaration import Patch, insert_after

from ._common import CONFIG, SPECULATORS, TAG, V030, V04X

_EDIT = insert_after(
    "from pydantic import BaseModel, ConfigDict, Field\nfrom transformers import PretrainedConfig\n",
    f"""
import transformers.configuration_utils as _hf_config_utils

if not hasattr(_hf_config_utils, "torch"):
    # {TAG}: transformers 5 annotates PreTrainedConfig.dtype with torch.dtype but
    # imports torch only under TYPE_CHECKING; pydantic 2.14 must resolve the name
    # when it rebuilds speculators' config models.
    import torch

    _hf_config_utils.torch = torch
""",
)

PATCH = Patch(
    id="deps.transformers5_config_torch_annotation",
    title="speculators imports under transformers 5 + pydantic 2.14 (torch.dtype forward reference)",
    why=(
        "transformers 5 declares `dtype: str | torch.dtype | None` on PreTrainedConfig while importing torch "
        "only for type checking. When speculators rebuilds its pydantic config models at import time, "
        "pydantic 2.14 evaluates that annotation and `import speculators` fails with "
        "\"PydanticUndefinedAnnotation: name 'torch' is not defined\"."
    ),
    how="Before speculators' models are built, make `torch` resolvable in transformers.configuration_utils.",
    upstream="huggingface/transformers v5 (PreTrainedConfig dataclass fields); pydantic 2.14 forward-ref evaluation",
    removal="when transformers.config_torch_annotation is no longer 'unresolvable', or speculators pins transformers<5",
    target="speculators",
    versions={"speculators": SPECULATORS},
    requires={"transformers.config_torch_annotation": ("unresolvable",)},
    symptom="PydanticUndefinedAnnotation: name 'torch' is not defined",
    edits={V030: {CONFIG: (_EDIT,)}, V04X: {CONFIG: (_EDIT,)}},
)
