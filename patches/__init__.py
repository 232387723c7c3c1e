"""Patch declarations, one module per upstream change (shipped as ``compat.patches``).

Modules are applied in name order; each defines ``PATCH`` (a
:class:`compat.declaration.Patch`).  ``python -m compat.catalogue`` renders
them as the markdown catalogue in ``PATCHES.md``.
"""
