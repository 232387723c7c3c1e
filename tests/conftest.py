"""The checkout first on sys.path, and every deselection said with which tests and why (README issue: a lane said
only "N deselected")."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DESELECTED = pytest.StashKey[list]()
SELECTED_MARKERS = pytest.StashKey[set]()
#: words of a -m expression that name no marker
KEYWORDS = {"and", "or", "not", "True", "False"}
#: pytest's own markers: never a reason
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings", "tryfirst", "trylast"}
#: tests/contract/conftest.py marks every contract test ``contract`` except these, each selected on its own
NOT_CONTRACT = ("serve", "mla", "parallel")


def pytest_configure(config):
    from tests.markers import MARKERS

    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_deselected(items):
    for item in items:
        item.config.stash.setdefault(DESELECTED, []).append(item)


def pytest_collection_finish(session):
    session.config.stash[SELECTED_MARKERS] = {m.name for item in session.items for m in item.iter_markers()}


def described_markers(config) -> dict[str, str]:
    """Each registered marker's description (of a name registered twice, the longer text: it says more)."""
    found: dict[str, str] = {}
    for line in config.getini("markers"):
        name, _, text = line.partition(":")
        name = name.split("(")[0].strip()
        if len(text.strip()) > len(found.get(name, "")):
            found[name] = text.strip()
    return found


def why(item, expression: str, selected: set[str]) -> tuple[str, ...]:
    """The markers that explain the item's deselection by ``-m expression``: those it carries that the expression
    excludes (``proof`` under ``not proof``), and for a marker it lacks, why it lacks it (a test that is not
    ``contract`` is ``serve``, ``mla`` or ``parallel``) or ``not marked NAME``.  When no single marker decides,
    its own markers that no selected test carries."""
    from _pytest.mark.expression import Expression

    own = {m.name for m in item.iter_markers()} - BUILTIN
    try:
        expr = Expression.compile(expression or "True")
    except Exception:  # noqa: BLE001 (pytest itself reports a bad expression)
        return tuple(sorted(own))
    selects = lambda names: expr.evaluate(lambda name, **kwargs: name in names)  # noqa: E731
    if selects(own):
        return ("not matched by -k",)
    named = set(re.findall(r"[A-Za-z_]\w*", expression)) - KEYWORDS
    blocking = [m for m in sorted(own) if selects(own - {m})]
    lacking = [n for n in sorted(named - own) if selects(own | {n})]
    reasons = blocking
    for name in lacking:
        instead = [m for m in NOT_CONTRACT if m in own] if name == "contract" else []
        reasons += instead or [f"not marked {name}"]
    return tuple(dict.fromkeys(reasons or sorted(own - selected - {"contract"})))


def deselection_lines(items, expression: str, described: dict[str, str], selected: set[str]) -> list[str]:
    """One line per reason: how many, the markers' descriptions, and the test files."""
    groups: dict[tuple[str, ...], list] = {}
    for item in items:
        groups.setdefault(why(item, expression, selected), []).append(item)
    lines = []
    for markers, grouped in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        files = sorted({item.nodeid.split("::")[0] for item in grouped})
        reason = "; ".join(f"{m}: {described[m]}" if m in described else m for m in markers) or "no marker"
        lines.append(f"{len(grouped)} deselected ({reason}) in {', '.join(files)}")
    return lines


def pytest_terminal_summary(terminalreporter, config):
    items = config.stash.get(DESELECTED, [])
    if not items:
        return
    expression = config.option.markexpr or ""
    keyword = f" -k {config.option.keyword!r}" if getattr(config.option, "keyword", "") else ""
    terminalreporter.write_sep("=", f"deselected by -m {expression!r}{keyword}", bold=True)
    selected = config.stash.get(SELECTED_MARKERS, set())
    try:
        lines = deselection_lines(items, expression, described_markers(config), selected)
    except Exception as error:  # noqa: BLE001 (a summary line must never fail the session)
        lines = [f"{len(items)} deselected (the reasons could not be told: {error!r})"]
    for line in lines:
        terminalreporter.write_line(line)
