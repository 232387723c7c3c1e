"""Version parsing and prefilters over nightly-style versions (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compat import versions

nums = st.integers(min_value=0, max_value=40)
commits = st.text(alphabet="0123456789abcdef", min_size=7, max_size=12)


@st.composite
def nightlies(draw):
    major, minor, micro = draw(nums), draw(nums), draw(nums)
    pre = draw(st.sampled_from(["", "rc1", "rc2", "a1"]))
    dev = draw(st.integers(min_value=0, max_value=999))
    commit = draw(commits)
    cuda = draw(st.sampled_from(["", ".cu129", ".cpu", ".rocm6"]))
    return f"{major}.{minor}.{micro}{pre}.dev{dev}+g{commit}{cuda}", (major, minor, micro), commit


@given(nightlies())
def test_nightly_commit_is_kept(case):
    text, _, commit = case
    assert versions.nightly_commit(text) == commit


@given(nightlies())
def test_dev0_floor_includes_every_nightly_of_that_release(case):
    text, (a, b, c), _ = case
    assert versions.in_range(f">={a}.{b}.{c}.dev0", text)
    assert not versions.in_range(f">={a}.{b}.{c + 1}.dev0", text)
    assert versions.in_range(f"<{a}.{b}.{c + 1}.dev0", text)


@given(nums, nums, nums)
def test_release_is_inside_its_own_dev0_range(a, b, c):
    assert versions.in_range(f">={a}.{b}.{c}.dev0,<{a}.{b}.{c + 1}.dev0", f"{a}.{b}.{c}")
    assert versions.in_range(f">={a}.{b}.{c}.dev0", f"{a}.{b}.{c}.post2")


def test_prereleases_count_whatever_packaging_defaults_to():
    assert versions.in_range(">=0.16.0.dev0", "0.16.0rc2.dev123+gabc1234")
    assert versions.in_range(">=0.11", "0.12.0rc1")
    assert versions.nightly_commit("0.32.0") is None
    assert versions.nightly_commit("0.16.0rc2.dev123+g933cdea44.cu129") == "933cdea44"


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="not a PEP 440 version"):
        versions.parse("banana")
    with pytest.raises(ValueError, match="not a PEP 440 specifier"):
        versions.in_range(">=>1", "1.0")
