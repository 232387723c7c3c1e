"""specdec-compat: keep speculators' EAGLE-3 hidden-state pipeline working on moving vLLM.

Pipeline (one module per box):
    sources  -> read files from an installed dist, a wheel, an sdist or a tree
    surface  -> named probes (compat.probes) evaluated statically with ``ast``
    registry -> patch declarations (compat.patches) judged against the surface
    patcher  -> pristine-based, atomic, locked, revertible source edits
    report   -> human table + JSON, documented exit codes
"""

__all__ = ["__version__"]
__version__ = "0.1.0"  # the one place: pyproject.toml reads it (setuptools dynamic version, attr)
