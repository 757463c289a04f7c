"""Payload serialisation: out-of-band buffers, __main__ fallback, error descriptions."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regency._runtime._pickling import OOB_THRESHOLD, describe_unpicklable, dumps, loads


def roundtrip(obj: object) -> object:
    data, buffers = dumps(obj)
    return loads(data, [b.raw() for b in buffers])


def test_large_numpy_array_goes_out_of_band_without_copy() -> None:
    a = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
    data, buffers = dumps((a,))
    assert len(data) < 1024
    assert len(buffers) == 1
    assert np.shares_memory(np.frombuffer(buffers[0].raw(), dtype=np.float64), a)
    (b,) = loads(data, [bb.raw() for bb in buffers])
    assert (a == b).all()


def test_small_arrays_stay_in_band() -> None:
    data, buffers = dumps(np.zeros(16))
    assert buffers == []
    assert (loads(data) == np.zeros(16)).all()


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_large_bytes_at_top_level_and_one_level_down_go_out_of_band(kind: type) -> None:
    payload = kind(b"x" * (OOB_THRESHOLD + 1))
    for obj in (payload, (payload, 1), [payload], {"k": payload}):
        data, buffers = dumps(obj)
        assert len(buffers) == 1, obj.__class__
        back = loads(data, [b.raw() for b in buffers])
        inner = back if isinstance(back, (bytes, bytearray)) else (
            back["k"] if isinstance(back, dict) else back[0])
        assert type(inner) is kind and inner == payload


def test_functions_from_main_are_pickled_by_value() -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    exec("def f(x):\n    return x + 1\n", ns)
    data, _ = dumps(ns["f"])
    assert b"__main__" in data or len(data) > 50
    f = pickle.loads(data)
    assert f(1) == 2


def test_lambdas_work() -> None:
    assert roundtrip(lambda x: x * 3)(2) == 6  # type: ignore[operator]


def test_describe_unpicklable_names_the_argument() -> None:
    lock = threading.Lock()
    assert "positional argument 1" in describe_unpicklable((1, lock), {})
    assert "keyword argument 'guard'" in describe_unpicklable((), {"guard": lock})


@settings(max_examples=60, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary(max_size=64),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4),
                                                                      children, max_size=4),
    max_leaves=20,
))
def test_roundtrip_of_plain_data(obj: object) -> None:
    assert roundtrip(obj) == obj


def test_large_bytes_arguments_go_out_of_band() -> None:
    from regency._runtime._pickling import dumps_call

    payload = b"y" * (OOB_THRESHOLD * 2)
    data, buffers = dumps_call((1, payload), {"k": bytearray(payload)})
    assert len(buffers) == 2
    assert len(data) < 1024


def test_torch_cpu_tensors_go_out_of_band_without_copy() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 18, dtype=torch.float32)
    data, buffers = dumps({"w": t, "p": torch.nn.Parameter(torch.ones(4))})
    assert len(data) < 2048 and len(buffers) == 1
    assert np.shares_memory(np.frombuffer(buffers[0].raw(), dtype=np.float32), t.numpy())
    back = loads(data, [b.raw() for b in buffers])
    assert torch.equal(back["w"], t)
    assert isinstance(back["p"], torch.nn.Parameter) and back["p"].requires_grad


def test_tensors_beside_a_lambda_go_out_of_band_too() -> None:
    """The by-value path (cloudpickle) sends tensors the same way, call after call."""
    torch = pytest.importorskip("torch")
    t = torch.arange(1 << 18, dtype=torch.float32)
    for _ in range(2):  # the second call reuses the dispatch table made by the first
        data, buffers = dumps((lambda x: x + 1, t))
        assert len(buffers) == 1
        fn, back = loads(data, [b.raw() for b in buffers])
        assert fn(1) == 2 and torch.equal(back, t)


class _Registered:
    def __init__(self, value: int) -> None:
        self.value = value


def _rebuild_registered(value: int) -> _Registered:
    return _Registered(value * 10)


def test_a_reducer_registered_after_the_first_call_is_used() -> None:
    pytest.importorskip("torch")
    import copyreg

    dumps(_Registered(1))  # the dispatch table is made (and kept) here
    copyreg.pickle(_Registered, lambda r: (_rebuild_registered, (r.value,)))
    try:
        assert roundtrip(_Registered(2)).value == 20  # type: ignore[attr-defined]
    finally:
        del copyreg.dispatch_table[_Registered]


@settings(max_examples=80, deadline=None)
@given(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
       | st.complex_numbers(allow_nan=False) | st.text(max_size=5000)
       | st.binary(max_size=5000), st.integers(1, 3))
def test_scalars_take_the_short_path_and_round_trip(value: object, takers: int) -> None:
    from regency._runtime._pickling import dumps_call

    data, buffers = dumps(value)
    assert buffers == [] and loads(data) == value
    data, buffers = dumps_call((value, value), {}, takers)
    assert buffers == [] and loads(data) == ((value, value), {})


def test_a_scalar_subclass_from_main_is_pickled_by_value() -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    exec("class Level(int):\n    def twice(self):\n        return 2 * self\n", ns)
    level = ns["Level"](4)  # type: ignore[operator]
    for data, _ in (dumps(level), dumps((level,))):
        back = pickle.loads(data)
        back = back if not isinstance(back, tuple) else back[0]
        assert back.twice() == 8 and type(back).__name__ == "Level"
