"""The placeholder a rank with a failed input sends to a reduction shows in the result, whatever
the other ranks send; results without it need no agreement round (``_tensor._agreement``).

The reductions are simulated locally (what gloo computes, element by element)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from regency._tensor._agreement import _may_hide_an_error, _placeholder  # noqa: E402

LOCAL = {
    "sum": lambda s: s.sum(0), "avg": lambda s: s.sum(0) / 2, "product": lambda s: s.prod(0),
    "min": lambda s: s.min(0).values, "max": lambda s: s.max(0).values,
    "band": lambda s: s[0] & s[1], "bor": lambda s: s[0] | s[1], "stack": lambda s: s,
}
CASES = [(r, torch.float32) for r in ("sum", "avg", "product", "min", "max", "stack")] + [
    (r, torch.int64) for r in ("min", "max", "product", "band", "bor", "stack")] + [
    ("bor", torch.uint8), ("max", torch.float16), ("sum", torch.complex64)]


def _other(dtype: torch.dtype) -> torch.Tensor:
    return (torch.arange(6).reshape(2, 3) * 7 - 5).to(dtype)


@pytest.mark.parametrize("reduction,dtype", CASES)
def test_a_placeholder_shows_in_the_result(reduction: str, dtype: torch.dtype) -> None:
    other = _other(dtype)
    for parts in ([_placeholder(((2, 3), dtype, "cpu"), reduction), other],
                  [other, _placeholder(((2, 3), dtype, "cpu"), reduction)]):
        result = LOCAL[reduction](torch.stack(parts))
        assert _may_hide_an_error(result, reduction, False), (reduction, dtype, result)


@pytest.mark.parametrize("reduction,dtype", CASES)
def test_an_ordinary_result_needs_no_agreement(reduction: str, dtype: torch.dtype) -> None:
    result = LOCAL[reduction](torch.stack([_other(dtype) + 9, _other(dtype) + 10]))
    assert not _may_hide_an_error(result.to(dtype), reduction, False)


@pytest.mark.parametrize("reduction,dtype,scatter", [
    ("sum", torch.int64, False), ("bxor", torch.int64, False), ("avg", torch.int64, False),
    ("sum", torch.float32, True), ("max", torch.bool, False)])
def test_reductions_without_a_placeholder_value_always_agree(
        reduction: str, dtype: torch.dtype, scatter: bool) -> None:
    assert _may_hide_an_error(torch.ones(3, dtype=dtype), reduction, scatter)


def test_an_empty_result_always_agrees() -> None:
    assert _may_hide_an_error(torch.ones(0), "sum", False)
