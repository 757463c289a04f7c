"""Serialisation of user payloads: pickle protocol 5 with out-of-band buffers.

Theory of operation
-------------------
Payloads (endpoint arguments, results, port messages) are pickled with protocol 5 and a
``buffer_callback``, so numpy arrays, torch tensors and ``PickleBuffer``-aware objects above
``OOB_THRESHOLD`` bytes travel as separate frames and are never copied into the pickle.
Large ``bytes``/``bytearray`` values at the top level of a payload (or one level down in a
tuple, list or dict) are wrapped so they go out-of-band too.

Plain ``pickle`` is about six times faster than ``cloudpickle`` for small messages, but it
pickles classes and functions *by reference*, which breaks for things defined in the sender's
``__main__`` (a worker cannot import the user's script). So we pickle with plain ``pickle``
first and fall back to ``cloudpickle`` (by value) when that fails or when the stream names
``__main__`` at all. The check is a byte search over a small pickle; it may send a payload
that merely contains the text ``__main__`` down the slow path, which is still correct.

CUDA tensors are not pickled through the host: they are *lent* through the data plane
(``regency._dataplane._lend``) and each receiver takes its own copy device to device. A call
to several members says how many takers its payload has (``dumps_call(..., takers=n)``).
"""

from __future__ import annotations

import copyreg
import importlib
import io
import os
import pickle
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

import cloudpickle

OOB_THRESHOLD: Final = 64 * 1024
_TORCH_NUMPY: set[Any] = set()  # torch dtypes numpy can view (filled on first use)
_PICKLERS: dict[type, tuple[int, type]] = {}  # base pickler -> (copyreg's size, subclass)
_MAIN: Final = b"__main__"

Buffers = list[pickle.PickleBuffer]

#: Values that pickle in one C call, with nothing out-of-band and nothing by value (exact
#: types: a subclass may come from ``__main__``). Short strings and bytes only: large ones
#: go out-of-band.
_SCALARS: Final = frozenset({int, float, bool, complex, type(None), str, bytes})
_SHORT: Final = 4096


class _Takers(threading.local):
    """How many receivers the payload being pickled on this thread has, and how to take
    back the CUDA tensors lent while pickling it (if that attempt is thrown away)."""

    n = 1
    undo: list[Callable[[], None]] | None = None


_takers: Final = _Takers()


class _OutOfBand:
    """Wraps a large bytes-like value so that pickle emits it as an out-of-band buffer."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        kind = type(self.data)
        return _restore, (pickle.PickleBuffer(self.data), kind is bytes)


def _restore(buf: Any, as_bytes: bool) -> bytes | bytearray:
    view = memoryview(buf)
    if as_bytes:
        # A bytes object cannot wrap foreign memory: one copy on the receiving side.
        return view.tobytes()
    owner = view.obj
    if isinstance(owner, bytearray) and len(owner) == view.nbytes:
        return owner  # the receive buffer itself: no copy
    return bytearray(view)


def _wrap(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)) and len(value) >= OOB_THRESHOLD:
        return _OutOfBand(value)
    return value


def _wrap_shallow(obj: Any) -> Any:
    """Mark large bytes at the top level and one container level down."""
    if isinstance(obj, (bytes, bytearray)):
        return _wrap(obj)
    if type(obj) is tuple:
        return tuple(_wrap(v) for v in obj)
    if type(obj) is list:
        return [_wrap(v) for v in obj]
    if type(obj) is dict:
        return {k: _wrap(v) for k, v in obj.items()}
    return obj


def dumps(obj: Any) -> tuple[bytes, Buffers]:
    """Pickle ``obj``; returns the in-band pickle and the out-of-band buffers."""
    if _scalar(obj):  # a step count, a loss: the common small reply, in one C call
        return pickle.dumps(obj, 5), []
    return _dumps(_wrap_shallow(obj))


def dumps_call(args: tuple[Any, ...], kwargs: dict[str, Any],
               takers: int = 1) -> tuple[bytes, Buffers]:
    """Pickle endpoint arguments for ``takers`` receivers; large bytes among them travel
    out-of-band."""
    if not kwargs and _scalars(args):
        return pickle.dumps((args, kwargs), 5), []
    if any(_is_large_bytes(v) for v in args) or any(_is_large_bytes(v) for v in kwargs.values()):
        obj: Any = (_wrap_shallow(args), _wrap_shallow(kwargs))
    else:
        obj = (args, kwargs)
    if takers == 1:
        return _dumps(obj)
    _takers.n = takers
    try:
        return _dumps(obj)
    finally:
        _takers.n = 1


def dumps_inband(obj: Any) -> bytes:
    """One self-contained pickle (no out-of-band buffers), by value for ``__main__`` things."""
    try:
        data = pickle.dumps(obj, protocol=5)
        if _MAIN not in data:
            return data
    except Exception:
        pass
    return cloudpickle.dumps(obj, protocol=5)


def _scalar(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is bytes:
        return len(value) < _SHORT
    return kind in _SCALARS


def _scalars(args: tuple[Any, ...]) -> bool:
    return all(_scalar(value) for value in args)  # mypyc turns this into a plain loop


def _is_large_bytes(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray)) and len(value) >= OOB_THRESHOLD


def _dumps(obj: Any) -> tuple[bytes, Buffers]:
    buffers: Buffers = []

    def callback(buf: pickle.PickleBuffer) -> bool:
        if buf.raw().nbytes < OOB_THRESHOLD:
            return True  # small: keep it in-band
        buffers.append(buf)
        return False

    torch = sys.modules.get("torch")
    if torch is None:
        try:
            data = pickle.dumps(obj, protocol=5, buffer_callback=callback)
            if _MAIN not in data:
                return data, buffers
        except Exception:
            pass
        buffers.clear()
        return cloudpickle.dumps(obj, protocol=5, buffer_callback=callback), buffers
    _takers.undo = []
    try:
        try:
            data = _dumps_with_tensors(obj, callback, torch, pickle.Pickler)
            if _MAIN not in data:
                return data, buffers
        except Exception:
            pass
        _forget_attempt(buffers)  # by value this time
        try:
            return _dumps_with_tensors(obj, callback, torch, cloudpickle.Pickler), buffers
        except BaseException:
            _forget_attempt(buffers)
            raise
    finally:
        _takers.undo = None


def _forget_attempt(buffers: Buffers) -> None:
    """Throw away what a pickling attempt produced (its buffers, its CUDA lends)."""
    buffers.clear()
    for cb in _takers.undo or ():
        cb()
    if _takers.undo:
        _takers.undo.clear()


def _dumps_with_tensors(obj: Any, callback: Any, torch: Any, base: Any) -> bytes:
    """Pickle with CPU tensors sent as their numpy view: out-of-band, never copied.

    torch's own pickling copies a tensor's storage into the pickle. Only used when torch is
    already imported (regency never imports it itself).
    """
    f = io.BytesIO()
    _tensor_pickler(base, torch)(f, protocol=5, buffer_callback=callback).dump(obj)
    return f.getvalue()


def _tensor_pickler(base: type, torch: Any) -> type:
    """``base`` with tensors reduced by :func:`_reduce_tensor`: a subclass whose class holds
    the dispatch table, since a pickler reads it once, when made (set on a cloudpickle
    pickler afterwards, it would be ignored). Made once per base, again whenever
    ``copyreg``'s table changed size (flattening cloudpickle's table costs about 30 us)."""
    size = len(copyreg.dispatch_table)
    cached = _PICKLERS.get(base)
    if cached is not None and cached[0] == size:
        return cached[1]
    source = getattr(base, "dispatch_table", None)  # the C pickler's is a descriptor
    table = dict(source if isinstance(source, Mapping) else copyreg.dispatch_table)
    table[torch.Tensor] = _reduce_tensor
    table[torch.nn.Parameter] = _reduce_tensor
    pickler = type(f"Tensor{base.__name__}", (base,), {"dispatch_table": table})
    _PICKLERS[base] = (size, pickler)
    return pickler


def _reduce_tensor(t: Any) -> Any:
    torch = _torch()
    if torch._C._len_torch_dispatch_stack():  # a device mesh is active: its mode would take
        return t.__reduce_ex__(5)  # our view of the tensor for a remote op; torch's own way
    if not _TORCH_NUMPY:
        _TORCH_NUMPY.update({torch.float64, torch.float32, torch.float16, torch.int64,
                             torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
                             torch.complex64, torch.complex128})
    parameter = isinstance(t, torch.nn.Parameter)
    plain = not (t.is_sparse or t.is_quantized or t.is_conj() or t.is_neg())
    if t.device.type == "cuda" and plain and os.environ.get("REGENCY_CUDA_LEND") != "0":
        from .._dataplane._lend import reduce_cuda_tensor  # only once CUDA tensors are sent

        return reduce_cuda_tensor(t, _takers.n, parameter, _takers.undo)
    if t.device.type != "cpu" or not plain or t.dtype not in _TORCH_NUMPY:
        return t.__reduce_ex__(5)  # torch's own way (copies)
    return _rebuild_tensor, (t.detach().contiguous().numpy(), bool(t.requires_grad), parameter)


def _rebuild_tensor(array: Any, requires_grad: bool, parameter: bool) -> Any:
    torch = _torch()
    if not array.flags.writeable:
        array = array.copy()  # small, in-band arrays arrive read-only
    t = torch.from_numpy(array)
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _torch() -> Any:
    """torch, imported into a local (compiled, an ``import`` statement would bind a global
    ``torch`` here, and pickle would then name torch's objects as this module's)."""
    return importlib.import_module("torch")


def loads(data: bytes | memoryview, buffers: Any = ()) -> Any:
    """Inverse of :func:`dumps`; ``buffers`` are the out-of-band buffers, in order."""
    return pickle.loads(data, buffers=buffers)


def describe_unpicklable(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Find which argument cannot be pickled and say why (used for error messages)."""
    for i, value in enumerate(args):
        why = _why_unpicklable(value)
        if why is not None:
            return f"positional argument {i} ({type(value).__name__}): {why}"
    for key, value in kwargs.items():
        why = _why_unpicklable(value)
        if why is not None:
            return f"keyword argument {key!r} ({type(value).__name__}): {why}"
    return "the arguments could not be pickled"


def _why_unpicklable(value: Any) -> str | None:
    try:
        cloudpickle.dumps(value, protocol=5, buffer_callback=lambda b: False)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
