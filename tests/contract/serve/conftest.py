"""Serve-path contract fixtures: a real ``vllm serve`` per model, speculators' own client, K1 via the real patcher.

These tests run in a lane with speculators >= 0.5 (``python3 fixtures/lanes.py
build serve``) under the global vLLM lock:

    flock /tmp/vllm.lock python3 fixtures/lanes.py run serve -- python -m pytest -p no:cacheprovider -m serve tests/contract/serve

In an old-path lane (speculators < 0.5) they are skipped with that reason,
never counted as passes.  Each model's server runs once per module; the tests read its result.
"""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass, field

import pytest
from packaging.version import Version

from compat.layout import cache_root


def pytest_configure(config):
    config.addinivalue_line("markers", "serve: the modern path: a real `vllm serve` + speculators >= 0.5's client")


@pytest.fixture(scope="session", autouse=True)
def serve_lane():
    try:
        version = md.version("speculators")
    except md.PackageNotFoundError:
        pytest.skip("the serve path needs speculators >= 0.5 (lane: serve); speculators is not installed")
    if Version(version) < Version("0.5"):
        pytest.skip(f"the serve path needs speculators >= 0.5 (lane: serve); this lane has {version}")
    return version


@dataclass(frozen=True)
class Launch:
    """What the lane's speculators release does to every server it launches, and why a test cannot observe what
    those options turn off ('' where nothing is forced)."""

    options: dict = field(default_factory=dict)  # ServeSpec options its launch script forces
    chunked_off: str = ""


@pytest.fixture(scope="session", autouse=True)
def launch(serve_lane):
    """speculators 0.7.0.x has no ``generate-offline-data``: its repo script's client (spec07_client, the release's
    own functions) runs in its place, and servers start as its launch script starts them (chunked prefill off)."""
    if Version(serve_lane).release[:2] != (0, 7):
        yield Launch()
        return
    from compat.serve import client

    from . import spec07_client

    patch = pytest.MonkeyPatch()
    patch.setattr(client, "COMMAND", ("-m", spec07_client.__name__))
    yield Launch(spec07_client.launch_options(), spec07_client.LAUNCH_REASON)
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def applied_through_the_cli(serve_lane, launch):
    """Every serve lane first runs what a user runs, ``compat apply`` then ``compat apply --verify`` (the console
    script's module, in a process of its own), on its real install: both exit as the plan answers (0, or 1 with the
    plan's NO and nothing written), then ``compat apply --revert`` leaves the lane pristine for the proofs, which
    put their patches on and off with the patcher (switch.py).  Only the CLI
    catches a patch that applies but never verifies (K11 once did)."""
    import json
    import subprocess
    import sys

    def cli(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
        proc = subprocess.run([sys.executable, "-m", "compat.cli", "apply", *args, "--json"], capture_output=True,
                              text=True, timeout=600)
        try:
            return proc, json.loads(proc.stdout)
        except ValueError:
            raise AssertionError(f"compat apply {' '.join(args)} printed no JSON (exit {proc.returncode})\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None

    applied, doc = cli()
    verified, checked = cli("--verify")
    reverted = subprocess.run([sys.executable, "-m", "compat.cli", "apply", "--revert"], capture_output=True,
                              text=True, timeout=600)
    said = f"apply: {doc.get('problems')} {doc.get('plan_answer')}; --verify: {checked.get('problems')}"
    expected = 1 if (doc.get("plan_answer") or "").startswith("NO:") else 0
    assert applied.returncode == verified.returncode == expected, said
    assert expected == 0 or not doc.get("written"), f"apply wrote {doc.get('written')} under the plan's NO"
    assert reverted.returncode == 0, reverted.stdout[-2000:] + reverted.stderr[-2000:]
    return doc


#: the FLAGS args ServeSpec has a field for; any other goes to extra_args as given
FLAG_OPTIONS = {"--no-enable-chunked-prefill": ("enable_chunked_prefill", False),
                "--no-enable-prefix-caching": ("enable_prefix_caching", False)}


@pytest.fixture(scope="session")
def plan_flags(applied_through_the_cli) -> tuple[str, ...]:
    """The `vllm serve` arguments `compat plan`'s FLAGS ask for on this install (apply's JSON carries the plan's
    rules): a server started as a user would start it after reading the plan."""
    return tuple(arg for rule in applied_through_the_cli.get("rules", []) if rule["word"] == "FLAGS"
                 for arg in rule.get("args", []))


def with_plan_flags(options: dict, flags: tuple[str, ...]) -> dict:
    """ServeSpec ``options`` with the plan's FLAGS added."""
    out, extra = dict(options), list(options.get("extra_args", []))
    for arg in flags:
        if arg in FLAG_OPTIONS:
            field_name, value = FLAG_OPTIONS[arg]
            out[field_name] = value
        elif arg not in extra:
            extra.append(arg)
    if extra:
        out["extra_args"] = extra
    return out


@pytest.fixture(scope="session")
def vllm_base(serve_lane):
    """The kit's patches every serve run on this vLLM needs (switch.BASE: K1, K11, K12 where vLLM needs them), applied
    for the session; the lane's vLLM is left pristine afterwards."""
    from . import switch

    base = switch.base()
    switch.only("vllm", base)
    yield base
    switch.only("vllm", [])


@pytest.fixture(scope="session")
def k1_on(vllm_base):
    """K1 applied for the session (this vLLM must need it)."""
    from . import k1

    if k1.PATCH_ID not in vllm_base:
        made, _ = k1.decision()
        raise AssertionError(f"K1 is {made.verdict} on this vLLM: {made.reason}")
    return vllm_base


@pytest.fixture
def vllm_patches(vllm_base):
    """``put(*ids)``: the session's base patches plus ``ids`` on vLLM for one test; the base alone afterwards.
    A leave-one-out proof calls ``put()`` (its patch left out) and ``put(ID)`` (applied)."""
    from . import switch

    yield lambda *ids: switch.only("vllm", [*vllm_base, *ids])
    switch.only("vllm", vllm_base)


#: a leave-one-out run may crash the engine mid-request: bounded waits, so a hung server fails the test in minutes
BOUNDED = {"start_timeout_s": 300.0, "client_timeout_s": 300.0}


def prompts(seed: int, vocab: int, budget: int) -> list[list[list[int]]]:
    """Two client runs: 11 prompts, then 33 (32 in flight and one waiting) holding a prompt of 3x the token budget
    and a repeat of a 64-token prompt of the first run (a prefix-cache hit)."""
    from compat.serve.__main__ import default_calls

    return default_calls(vocab, budget, seed)


def model_dir(name: str):
    return cache_root() / "models" / name


def work_dir(name: str):
    """A run's folder that outlives pytest's tmp dirs (server log, client logs, files): <cache>/serve-runs/<lane>/."""
    import os
    import shutil

    path = cache_root() / "serve-runs" / os.environ.get("SPECDEC_COMPAT_LANE", "adhoc") / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def tiny_llama_spec(name: str, seed: int, layer_ids: list[int], **options):
    """A tiny-Llama serve run of two client calls (``prompts(seed, 512, 64)``) without a prefix cache, in eager mode,
    with bounded waits: the proofs of vLLM < 0.22 (serve-021) differ only in the ids and the scheduler options."""
    from compat.serve import ServeSpec
    from fixtures.tiny_model import build_tiny_llama

    return ServeSpec(model=build_tiny_llama(model_dir("serve-tiny-llama")), work_dir=work_dir(name),
                     calls=prompts(seed, 512, 64), layer_ids=layer_ids, enable_prefix_caching=False,
                     extra_args=["--enforce-eager"], **BOUNDED, **options)
