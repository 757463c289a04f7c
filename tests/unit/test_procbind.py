"""``spawn_procs(proc_bind=...)``, what the controller checks: one dict per proc of a host,
known keys, numactl's list syntax."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._runtime._aggregate import ranges
from regency._runtime._procbind import check, parse_list


@given(st.sets(st.integers(0, 300), min_size=1))
def test_lists_read_back_what_ranges_write(cpus: set[int]) -> None:
    assert parse_list(ranges(cpus), "cpus") == cpus


def test_list_syntax() -> None:
    assert parse_list("0-3,8", "cpus") == {0, 1, 2, 3, 8}
    assert parse_list(5, "cpus") == {5} and parse_list(" 1, 2 ", "cpus") == {1, 2}
    with pytest.raises(ValueError, match=r"cpus='a': expected a list such as '0-3,8'"):
        parse_list("a", "cpus")
    with pytest.raises(ValueError, match="'3-1' is not a range"):
        parse_list("3-1", "cpus")
    with pytest.raises(ValueError, match="numbers above 65535 are not CPUs or nodes"):
        parse_list("0-4294967295", "cpus")  # a typo: refused, not expanded


def test_one_known_dict_per_proc_of_a_host() -> None:
    assert check([{"cpus": 0}, {"cpunodebind": "1", "membind": "1"}], 2) == [
        {"cpus": "0"}, {"cpunodebind": "1", "membind": "1"}]
    with pytest.raises(ValueError, match=r"proc_bind length \(1\) must equal procs_per_host "
                                         r"\(2\)"):
        check([{}], 2)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['cpu'\]; known: cpunodebind"):
        check([{"cpu": "0"}], 1)
    with pytest.raises(ValueError, match="'cpus' or 'physcpubind', not both"):
        check([{"cpus": "0", "physcpubind": "1"}], 1)
    with pytest.raises(TypeError, match="must be a list of dicts"):
        check({"cpus": "0"}, 1)
    with pytest.raises(TypeError, match=r"proc_bind\[0\] must be a dict"):
        check(["0"], 1)
    with pytest.raises(ValueError, match="membind='x'"):
        check([{"membind": "x"}], 1)
