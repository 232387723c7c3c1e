"""The fence every modern-path edit wraps its inserted lines in (the serve probes read around it)."""

from compat.serve.probes.connector import KIT_BEGIN, KIT_END

MODERN = ">=0.5"  # speculators releases that generate through vllm serve


def fenced(patch_id: str, body: str, indent: str) -> str:
    """``body`` (already indented) between the kit's begin/end markers at ``indent``."""
    return f"{indent}{KIT_BEGIN} {patch_id}\n{body}{indent}{KIT_END} {patch_id}\n"
