"""f. The harness's own evidence: every engine start judged again by a comparator that is not the product's, and
every run with its own log.

compat confirm's ``compare`` judges each run (the report's ``problems``); tests/contract/comparator.py, plain
torch written from the README's layer semantics, re-derives the per-layer error from the raw captures each run
saved and must reach the same verdict.  A run's log holds its own output only: a proof that reads its symptom
from its log cannot be satisfied by a neighbour's error text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract.comparator import BOUNDS, judge


def _generator_runs(cell_report) -> dict:
    """Every generator run of the cell by name: pristine, reverted, patched, bf16 and each proof."""
    runs = {part: cell_report[part]["run"] for part in ("pristine", "reverted", "patched", "bf16")
            if "run" in cell_report.get(part, {})}
    runs.update({f"proof {key}": run for key, run in (cell_report.get("proofs") or {}).get("runs", {}).items()})
    return runs


def _agree(name, run, verdicts) -> list[str]:
    """Where the independent verdicts and the product's differ, call by call.  A call captured whole must get the
    same verdict; one captured in part (a call of 33) can only find fewer faults."""
    calls = run["calls"]
    found = [] if len(verdicts) == len(calls) else [f"{name}: {len(verdicts)} captured calls, {len(calls)} judged"]
    for index, (verdict, call) in enumerate(zip(verdicts, calls)):
        product_ok = not call["problems"]
        if verdict.n != call["n"]:
            found.append(f"{name} call {index}: captured {verdict.n} prompts, judged {call['n']}")
        elif verdict.ok != product_ok and (verdict.whole or not verdict.ok):
            found.append(f"{name} call {index} (n={call['n']}): compat confirm says "
                         f"{'right' if product_ok else call['problems'][:3]}, the comparator "
                         f"{'right' if verdict.ok else verdict.problems[:3]}")
    return found


def test_every_engine_start_is_judged_again_independently(cell_report, tiny_model, engine_device):
    runs = _generator_runs(cell_report)
    generated = {name: run for name, run in runs.items() if run.get("calls")}
    assert "patched" in generated, runs.keys()
    failures = []
    for name, run in generated.items():
        if not run.get("captures"):
            failures.append(f"{name}: {len(run['calls'])} calls judged, no raw captures saved")
            continue
        failures += _agree(name, run, judge(run["captures"], tiny_model, engine_device))
    assert not failures, "\n".join(failures)


def test_patched_hidden_states_equal_hf_by_the_independent_comparator(patched_report, tiny_model, engine_device):
    run = patched_report["run"]
    verdicts = judge(run["captures"], tiny_model, engine_device)
    assert [v.n for v in verdicts] == [c["n"] for c in run["calls"]], verdicts
    assert any(v.whole and v.n >= 11 for v in verdicts), verdicts  # a call that crosses the ordering bug, whole
    for verdict in verdicts:
        assert verdict.ok, (verdict.n, verdict.problems)
        assert sorted(verdict.layers) == patched_report["layers"], verdict.layers


@pytest.mark.proof
def test_bf16_engine_is_wrong_by_the_independent_comparator(bf16_report, tiny_model, engine_device):
    if "not_run" in bf16_report:  # this host cannot start a bfloat16 engine of this vLLM (amx_host.py)
        pytest.skip(bf16_report["not_run"])
    verdicts = judge(bf16_report["run"]["captures"], tiny_model, engine_device)
    assert verdicts and all(v.whole for v in verdicts), verdicts
    for verdict in verdicts:
        passing = [k for k, rel in verdict.layers.items() if rel <= BOUNDS[engine_device]]
        assert sorted(verdict.layers) == bf16_report["layers"] and not passing, (verdict.n, verdict.layers)


def _headers(path) -> list[str]:
    return [line for line in Path(path).read_text(errors="replace").splitlines() if line.startswith("== harness run ")]


def test_every_run_has_its_own_log(cell_report):
    """Each generator run's vLLM log and output file are its own, headed by its name once; compat confirm's runs
    each wrote their own log too.  The proofs on the patched run's engine share that engine, and so its log."""
    runs = _generator_runs(cell_report)
    own = {name: run for name, run in runs.items() if not run.get("shared_engine")}
    logs = [run["log"] for run in own.values()]
    logs += [run["log"] for run in (cell_report.get("confirm") or {}).values() if run.get("log")]
    assert len(own) >= 2 and len(set(logs)) == len(logs), sorted(logs)
    for name, run in own.items():
        for path in (run["log"], run["output"]):
            heads = _headers(path)
            assert len(heads) == 1 and heads[0].startswith(f"== harness run {run['run_key']} ("), (name, path, heads)
    for name, run in runs.items():
        if run.get("shared_engine"):
            assert run["engine_log"] == cell_report["patched"]["run"]["log"], (name, run["engine_log"])
