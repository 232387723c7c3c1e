"""A toy distribution and patch set for patcher tests (no vLLM, no speculators)."""

from __future__ import annotations

from pathlib import Path

from compat.declaration import Edit, Patch
from compat.patcher import Patcher, open_target
from compat.registry import Decision
from fixtures.synthetic import make_dist

A = b'"""toy a"""\nX = 1\n\n\ndef f():\n    return 1\n'
B = b'"""toy b"""\nY = "old"\n'
PRISTINE = {"toy/__init__.py": b"", "toy/a.py": A, "toy/b.py": B}


def _patch(pid: str, edits: dict) -> Patch:
    return Patch(
        id=pid, title=pid, why="test", how="test", upstream="-", removal="-", target="toy",
        versions={}, requires={}, edits={"v": edits},
    )


PATCHES = [
    _patch("toy.x", {"toy/a.py": (Edit("X = 1\n", "X = 2\n"),)}),
    _patch("toy.f", {"toy/a.py": (Edit("    return 1\n", "    return 2  # patched\n"),)}),
    _patch("toy.y", {"toy/b.py": (Edit('Y = "old"\n', 'Y = "new"\n'),)}),
]
IDS = [p.id for p in PATCHES]


def expected(selected) -> dict[str, bytes]:
    """What each file must be after applying ``selected`` (computed independently of the patcher)."""
    a, b = A, B
    if "toy.x" in selected:
        a = a.replace(b"X = 1\n", b"X = 2\n")
    if "toy.f" in selected:
        a = a.replace(b"    return 1\n", b"    return 2  # patched\n")
    if "toy.y" in selected:
        b = b.replace(b'Y = "old"\n', b'Y = "new"\n')
    return {"toy/__init__.py": b"", "toy/a.py": a, "toy/b.py": b}


def make_site(root: Path, **kw) -> Path:
    site = root / "site-packages"
    make_dist(site, "toy", "1.0", dict(PRISTINE), **kw)
    return site


def decisions(selected) -> list[Decision]:
    return [Decision(p, "needed" if p.id in selected else "not-needed", "", "v") for p in PATCHES]


def apply(site: Path, selected, **kw) -> list[Decision]:
    """Apply ``selected``; returns the decisions after the file step."""
    return list(Patcher(open_target("toy", site), **kw).apply(decisions(selected), "fp").decisions)


def revert(site: Path, **kw):
    return Patcher(open_target("toy", site)).revert(**kw)


def snapshot(site: Path) -> dict[str, bytes]:
    return {rel: (site / rel).read_bytes() for rel in PRISTINE}
