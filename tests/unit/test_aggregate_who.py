"""Who printed alike lines, in the aggregated line's prefix (``_runtime/_aggregate.who``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regency._runtime import _aggregate
from regency._runtime._aggregate import ranges, who


@pytest.mark.parametrize(("labels", "text"), [
    (["talkers {'procs': 3}"], "talkers {'procs': 3}"),
    ([f"talkers {{'procs': {r}}}" for r in (0, 1, 2, 3, 4, 5, 7)], "talkers {'procs': 0-5,7}"),
    ([f"w {{'hosts': {h}, 'gpus': {g}}}" for h in (0, 1) for g in (0, 1)], "w, 4 procs"),
    (["a {'gpus': 0}", "b {'gpus': 1}"], "a {'gpus': 0}; b {'gpus': 1}"),
    (["a {'gpus': 0}", "a {'gpus': 1}", "b {'gpus': 1}"], "a {'gpus': 0-1}; b {'gpus': 1}"),
    (["odd label", "odd other"], "odd, 2 procs"),
])
def test_the_procs_that_printed_read_in_few_words(labels: list[str], text: str) -> None:
    assert who(labels) == text


@given(st.sets(st.integers(0, 200), min_size=1))
def test_ranges_name_every_value_and_no_other(values: set[int]) -> None:
    named: set[int] = set()
    for run in ranges(values).split(","):
        low, _, high = run.partition("-")
        named.update(range(int(low), int(high or low) + 1))
    assert named == values


def test_a_window_shows_each_group_once_with_its_procs() -> None:
    written: list[tuple[Any, ...]] = []
    flushes: list[Any] = []
    _aggregate.set_options("m", _aggregate.Options(window=5.0))
    try:
        for rank in range(3):
            _aggregate.intercept(f"m {{'gpus': {rank}}}", "stdout", [f"loss {rank}"],
                                 lambda *w: written.append(w), lambda _d, fn: flushes.append(fn))
        _aggregate.intercept("m {'gpus': 1}", "stdout", ["only me"],
                             lambda *w: written.append(w), lambda _d, fn: flushes.append(fn))
        assert len(flushes) == 1 and not written
        flushes[0]()
    finally:
        _aggregate._options.pop("m", None)
    members = [f"m {{'gpus': {rank}}}" for rank in range(3)]
    assert written == [("3 similar lines from m {'gpus': 0-2}", "stdout", ["loss 0"],
                        (3, members)),
                       ("m {'gpus': 1}", "stdout", ["only me"], None)]


def test_a_line_as_json_says_who_printed_it() -> None:
    import json

    from regency._runtime._aggregate import as_json

    one = json.loads(as_json("talkers {'gpus': 1}", "stderr", 'say "hi" é', 12.5))
    assert one == {"mesh": "talkers", "coords": {"gpus": 1}, "stream": "stderr",
                   "line": 'say "hi" é', "ts": 12.5}
    labels = [f"talkers {{'procs': {i}}}" for i in range(3)]
    many = json.loads(as_json("3 similar lines ...", "stdout", "x", 1, (4, labels)))
    assert many["count"] == 4 and many["procs"] == [
        {"mesh": "talkers", "coords": {"procs": i}} for i in range(3)]
    assert json.loads(as_json("anon", "stdout", "x", 1))["coords"] is None
    again = json.loads(as_json("my mesh {'gpus': 1} (respawned)", "stdout", "x", 1))
    assert again["mesh"] == "my mesh" and again["coords"] == {"gpus": 1}
    assert again["respawned"] is True


def test_labels_of_meshes_whose_names_have_spaces() -> None:
    from regency._runtime._aggregate import split_label

    assert split_label("my mesh {'gpus': 0}") == ("my mesh", {"gpus": 0}, "")
    assert split_label("t {'a': 1, 'b': 2} (respawned)") == ("t", {"a": 1, "b": 2},
                                                             "(respawned)")
    assert split_label("anon") == ("anon", None, "")
    assert split_label("odd label") == ("odd", None, "")  # no coordinates: the first word
    assert who(["my mesh {'gpus': 0}", "my mesh {'gpus': 1}"]) == "my mesh {'gpus': 0-1}"
