"""What a worker runs that its controller does not (``_api/_workers.what_differs``): a
Python of another minor version, or another cloudpickle, cannot load what the script
pickled by value; ``attach_to_workers`` warns of it."""

from __future__ import annotations

from regency._api._workers import runs_on, what_differs


def test_the_same_python_and_cloudpickle_differ_in_nothing() -> None:
    assert what_differs(runs_on()) == ""
    patch = runs_on()["python"].split(".")
    patch[2] = "999"
    assert what_differs({**runs_on(), "python": ".".join(patch)}) == ""  # patch releases


def test_another_minor_python_or_cloudpickle_is_named() -> None:
    mine = runs_on()
    text = what_differs({"python": "3.2.1", "cloudpickle": "0.0.1"})
    assert text == (f"Python 3.2.1 (this controller: {mine['python']}) and cloudpickle 0.0.1 "
                    f"(this controller: {mine['cloudpickle']})")


def test_a_worker_of_an_earlier_release_says_nothing_and_is_told_nothing() -> None:
    assert what_differs({"host": "h", "pid": 1}) == ""
