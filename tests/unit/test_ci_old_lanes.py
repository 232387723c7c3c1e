""".ci/old-lanes: the seed lane's bf16 engines named NOT RUN on a host with AMX tiles exist as written (a renamed
test would otherwise run there and fail, or a stale name deselect nothing), and nothing else is deselected."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = (ROOT / ".ci" / "old-lanes").read_text()


def named() -> list[str]:
    block = SCRIPT.split("seed_bf16=(", 1)[1].split(")", 1)[0]
    return block.split()


def test_each_named_engine_is_a_test_function_of_the_contract_suite():
    ids = named()
    assert len(ids) == 3, ids
    for node in ids:
        path, name = node.split("::")
        tree = ast.parse((ROOT / path).read_text())
        assert name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, node
        assert "bf16" in name or "p37" in name, node  # the bf16 engines and p37's proof (a bf16 engine there)


def test_only_the_seed_lane_and_only_amx_hosts_deselect():
    assert re.search(r"grep -qw amx_tile /proc/cpuinfo", SCRIPT)
    deselecting = [line for line in SCRIPT.splitlines() if "--deselect" in line]
    assert deselecting and all("lanes.py test --no-unit seed" in line for line in deselecting), deselecting
    assert "python3 fixtures/lanes.py test --no-unit pinned\n" in SCRIPT  # pinned runs everything
    assert "NOT RUN" in SCRIPT
