"""The README is a ten-minute read that links the pages holding the rest, and every such link works.

Every relative Markdown link in README.md and the pages under docs/ must name a file (or folder) that exists, and
a ``#fragment`` must name a heading of the page it points at, slugged as GitHub slugs headings (lower case,
punctuation but ``-`` and ``_`` dropped, each space a ``-``, a repeated heading ``-1``, ``-2``...).  Links inside
code (fenced blocks, inline spans) are text, not links.  External links (``http:``, ``https:``, ``mailto:``) are
not fetched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 250

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading)  # emphasis and code marks, not their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading slugs as its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(text: str) -> list[str]:
    return LINK.findall(INLINE_CODE.sub("", FENCE.sub("", text)))


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page.read_text()):
        if EXTERNAL.match(target):
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest.relative_to(page.parent)
            bad.append(f"{target}: {shown} has no heading #{fragment}")
    return bad


def test_the_slugs_are_githubs():
    assert slug("The serve path (speculators >= 0.5)") == "the-serve-path-speculators--05"
    assert slug("A speculators 0.9.0 user's own venv") == "a-speculators-090-users-own-venv"
    assert slug("The modern path: speculators >= 0.5 through `vllm serve`") == \
        "the-modern-path-speculators--05-through-vllm-serve"
    assert slug("The old path (speculators 0.3.0 / 0.4.x)") == "the-old-path-speculators-030--04x"


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Here\n\n## Here\n")
    page.write_text("[a](there.md#here-1) [b](there.md#nowhere) [c](gone.md) `[d](gone.md)` [e](https://x.org/y)\n"
                    "[g](#page) [h](#elsewhere)\n\n# Page\n\n```\n[f](gone.md)\n```\n")
    assert broken(page) == ["there.md#nowhere: there.md has no heading #nowhere", "gone.md: no such file",
                            "#elsewhere: page.md has no heading #elsewhere"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    assert not broken(page), f"{page.relative_to(ROOT)}: {broken(page)}"


def test_the_readme_is_a_ten_minute_read():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to a page under docs/"


def test_the_readme_links_every_page_that_took_its_detail():
    text = README.read_text()
    for page in ("docs/maintainers.md", "docs/modern-path.md", "docs/commands.md", "docs/how-it-works.md"):
        assert f"]({page}" in text, page
        assert (ROOT / page).is_file(), page


def test_the_readme_says_what_the_kit_depends_on():
    """pyproject.toml's dependencies, each named with its bound in the README's Install section."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    install = README.read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert deps and all(f"`{dep}`" in install for dep in deps), (deps, install)


def test_the_readme_gives_both_layer_conventions():
    section = README.read_text().split("## Layer semantics", 1)[1].split("\n## ", 1)[0]
    text = " ".join(section.split())
    assert "HF `hidden_states[k + 1]`" in text  # the old path's id k
    assert "HF `hidden_states[k]`, the residual entering layer `k`" in text  # the modern path's id k
    assert "final pre-norm state" in text
