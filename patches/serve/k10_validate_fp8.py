from compat.declaration import Patch, insert_before

from ._fence import fenced

ID = "speculators.serve.validate_fp8"
OFFLINE = "speculators/data_generation/offline.py"

PATCH = Patch(
    id=ID,
    title="speculators 0.9.0 --validate-outputs: check fp8 hidden states in float32",
    why=(
        "check_hidden_states calls torch.aminmax on the raw tensor. With the fp8 backend the file holds "
        "float8_e4m3fn, for which torch has no aminmax: every sample fails validation, is skipped, and the run "
        "aborts after --max-consecutive-errors."
    ),
    how="Upcast a one-byte floating tensor to float32 before aminmax (finite-ness is what is checked).",
    upstream="none yet (speculators 0.9.0, data_generation/offline.py)",
    removal="when a speculators release checks fp8 files without aminmax on float8",
    target="speculators",
    versions={"speculators": ">=0.9,<0.10"},
    requires={},
    variant_probe="serve.speculators.check_hidden_states",
    symptom='"aminmax_cpu" not implemented for \'Float8_e4m3fn\'',
    edits={
        "aminmax-raw": {
            OFFLINE: (
                insert_before(
                    "    lo, hi = torch.aminmax(hs)\n",
                    fenced(ID, "    if hs.is_floating_point() and hs.element_size() == 1:\n"
                               "        hs = hs.float()\n", "    "),
                ),
            )
        }
    },
)
