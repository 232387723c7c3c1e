"""The modern path has one home, ``compat/serve/``: its plan rules, probes, proofs, manifest and runtime
live there, and nowhere else in the kit, so a newcomer finds all of it in one place and the house does not sprawl
again.  Its patch declarations stay in ``patches/serve/`` (shipped as ``compat.patches.serve``).

The old path keeps the same parts one level up (``compat/plan.py``, ``compat/probes/``, ``compat/confirm/``).
"""

from __future__ import annotations

from pathlib import Path

from compat.probes import PROBES

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "compat"
HOME = PACKAGE / "serve"


def test_no_modern_path_module_outside_compat_serve():
    strays = [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py")
              if "serve" in p.stem and HOME not in p.parents]
    assert strays == [], f"the modern path's modules belong under compat/serve/: {strays}"


def test_the_home_holds_plan_probes_proofs_manifest_and_runtime():
    for part in ("plan.py", "probes/__init__.py", "proofs.py", "manifest.py", "runner.py", "spec.py", "checks.py"):
        assert (HOME / part).is_file(), part


def test_every_serve_probe_lives_in_compat_serve_probes_and_is_registered():
    homes = {name: spec.fn.__module__ for name, spec in PROBES.items()}
    serve = {name: home for name, home in homes.items() if name.startswith("serve.")}
    assert serve, "compat.probes registers the serve path's probes (compat.serve.probes)"
    assert all(home.startswith("compat.serve.probes.") for home in serve.values()), serve
    elsewhere = {name: home for name, home in homes.items()
                 if home.startswith("compat.serve.probes.") and not name.startswith("serve.")}
    assert elsewhere == {}, elsewhere
    defined = {p.stem for p in (HOME / "probes").glob("*.py") if p.stem != "__init__"}
    registering = {home.rsplit(".", 1)[-1] for home in serve.values()}
    assert registering <= defined


def test_importing_the_probe_registry_does_not_load_the_serve_runtime():
    import subprocess
    import sys

    code = ("import sys, compat.probes, compat.serve.plan; "
            "print(sorted(m for m in sys.modules if m.startswith(('compat.serve.runner', 'compat.confirm'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout
