"""Put K1 (``vllm.serve.cpu_connector``) on or off the lane's installed vLLM, with the kit's real patcher.

The decision comes from the registry over the installed packages' surface
(:mod:`.switch`), so the proof exercises the declaration, its probe and the
patcher as ``compat apply`` would; "off" is the patcher's byte-exact revert to
the RECORD-proven pristine file.
"""

from __future__ import annotations

from . import switch

PATCH_ID = "vllm.serve.cpu_connector"


def decision():
    """(K1's surface-level decision on the installed vLLM, the surface)."""
    return switch.decision(PATCH_ID)


def set_applied(applied: bool) -> None:
    """K1 on (True: the only kit patch on vLLM) or off (False: vLLM pristine)."""
    switch.only("vllm", [PATCH_ID] if applied else [])
