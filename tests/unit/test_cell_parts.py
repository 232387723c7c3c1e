"""benchmarks/cell_parts.py: which parts each priced variant asks the harness for."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.cell_parts import ALL, OPTIONAL, parts_without  # noqa: E402
from tests.contract.harness import parser  # noqa: E402


def test_every_part_is_one_the_harness_knows_and_the_full_variant_asks_for_all_of_them():
    """The harness's own default --parts (what a cell's whole suite asks for) plus the conftest's confirm and
    binding parts: a part renamed there and not here would be priced as nothing."""
    default = set(parser().get_default("parts").split(","))
    assert default | {"confirm", "binding"} == set(ALL)
    assert parts_without(None) == list(ALL)


def test_leaving_out_the_proofs_leaves_out_the_binding_proof_too_and_nothing_else():
    assert set(ALL) - set(parts_without("proofs")) == {"proofs", "binding"}
    for part in set(OPTIONAL) - {"proofs"}:
        assert set(ALL) - set(parts_without(part)) == {part}
    assert {"pristine", "patched"} <= set(parts_without("proofs")) and "pristine" not in OPTIONAL
