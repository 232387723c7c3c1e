"""docs/gpu/self-reference-h200.md is generated from the H200 records; a hand-edited figure fails here."""

from __future__ import annotations

from ci.gpu import self_page


def test_the_committed_page_is_the_records_rendered():
    assert self_page.main(["--check"]) == 0, "docs/gpu/self-reference-h200.md is stale: python -m ci.gpu.self_page"


def test_a_hand_edited_figure_is_caught(tmp_path, monkeypatch):
    edited = tmp_path / "page.md"
    edited.write_text(self_page.render().replace("0.205 engine starts", "0.05 engine starts"))
    monkeypatch.setattr(self_page, "PAGE", edited)
    assert self_page.main(["--check"]) == 1


def test_no_record_has_self_ok_where_hf_says_wrong():
    """The self-reference rule on the H200: the K13 pair agrees, and the right runs agree under today's bounds."""
    records = self_page._records()
    assert self_page.verdict_today(records["k13-left-out-self"]) == records["k13-left-out-hf"]["verdict"] == "WRONG"
    assert self_page.verdict_today(records["applied-self-float32"]) == records["applied-hf-float32"]["verdict"] == "OK"
