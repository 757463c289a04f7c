"""``TensorWorker``: the actor on every proc of an active mesh that runs the op stream.

It keeps a table ref -> local value. Ops run in the order they were issued; an op that fails
stores a :class:`WorkerError` under its results and the inputs it mutates, and an op that
reads such an error stores it too without running, so the error reaches every dependent
value and nothing else. ``run`` never raises: the actor stays healthy whatever the ops do.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves, tree_map

from .._api._actor import Actor, endpoint
from .._api._context import current_rank
from ..spmd import _interface_of, _listening_ip
from . import _extras, _p2p
from ._extras import OpaqueRef
from ._messages import DEFINE, DELETE, OP, RECV, SEND, GroupRef, RankRef, Ref, WorkerError

__all__ = ["TensorWorker", "resolve_function"]

MAX_FAILURES = 100  # failed ops a worker remembers for the report at exit


class _Poisoned(Exception):
    """An argument holds the error of an earlier op."""

    def __init__(self, error: WorkerError) -> None:
        self.error = error


def resolve_function(spec: str | bytes) -> Callable[..., Any]:
    """The function a DEFINE names: ``"op:ns.name.overload"``, ``"py:mod:qual"``, or pickle."""
    if isinstance(spec, bytes):
        return cloudpickle.loads(spec)  # type: ignore[no-any-return,unused-ignore]
    kind, _, name = spec.partition(":")
    if kind == "op":
        ns, op, overload = name.split(".")
        return getattr(getattr(getattr(torch.ops, ns), op), overload)  # type: ignore[no-any-return,unused-ignore]
    module, _, qual = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return,unused-ignore]


class _Missing:
    """A DEFINE that could not be resolved: calling it raises why."""

    def __init__(self, spec: str | bytes, why: str) -> None:
        self.spec = spec
        self.why = why

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"function {self.spec!r} could not be loaded on the worker:\n"
                           f"{self.why}")


class TensorWorker(Actor):
    """One per proc of a device mesh: runs batches of ops against a table of local values."""

    def __init__(self) -> None:
        self.rank = -1
        self.coords: dict[str, int] = {}
        self.labels: tuple[str, ...] = ()
        self.sizes: dict[str, int] = {}
        self.world = 1
        self.table: dict[int, Any] = {}
        self.fns: dict[int, Callable[..., Any]] = {}
        self.names: dict[int, str] = {}
        self.groups: dict[tuple[str, ...], Any] = {}
        self.comms_error = "init_comms was never received"
        self.joined = False  # whether this worker started the proc's gloo world
        self.store: Any = None  # rank 0: the gloo world's TCPStore, served by this proc
        self.inbox: _p2p.Inbox | None = None  # where to_mesh values arrive (made on demand)
        self.failures: list[WorkerError] = []  # ops that raised here (not those poisoned)
        _extras.on_worker[0] = True  # OpaqueRef values are readable in this proc

    def _locate(self) -> None:
        """Where this worker is in its mesh (known in endpoints, not yet in ``__init__``)."""
        point = current_rank()
        self.rank = point.rank
        self.coords = dict(point)
        self.labels = tuple(point.extent.labels)
        self.sizes = dict(zip(self.labels, point.extent.sizes))
        for s in self.sizes.values():
            self.world *= s

    # -- endpoints -------------------------------------------------------------------------
    @endpoint
    def run(self, batch: list[tuple[Any, ...]]) -> None:
        """Run a batch of messages in order (sent one-way; never raises)."""
        if self.rank < 0:
            self._locate()
        for msg in batch:
            kind = msg[0]
            if kind == OP:
                self._op(msg)
            elif kind == DELETE:
                pop = self.table.pop
                for r in msg[1]:
                    pop(r, None)
            elif kind == DEFINE:
                self._define(msg[1], msg[2])
            elif kind == SEND:
                _p2p.send(self, msg)
            elif kind == RECV:
                _p2p.recv(self, msg)

    @endpoint
    def fetch(self, tree: Any) -> tuple[str, Any]:
        """The value of ``tree`` here: ``("ok", pickled)`` or ``("error", WorkerError)``."""
        if self.rank < 0:
            self._locate()
        try:
            value = self._resolve(tree)
        except _Poisoned as p:
            return ("error", p.error)
        except KeyError as exc:
            return ("error", WorkerError(-1, self.rank, "fetch", f"KeyError: {exc}: the value "
                                         "is not defined on this worker (was it dropped?)"))
        value = tree_map(_local_copy, value)
        buf = io.BytesIO()
        pickle.dump(value, buf, protocol=5)
        return ("ok", buf.getvalue())

    @endpoint
    def call_value(self, fid: int, args: Any, kwargs: Any, probe: bool) -> tuple[str, Any]:
        """Run function ``fid`` here and return its value (pickled) rather than keep it; with
        ``probe``, tensors are replaced by their metadata (how ``remote`` learns shapes)."""
        if self.rank < 0:
            self._locate()
        try:
            out = self.fns[fid](*self._resolve(args), **self._resolve(kwargs))
        except _Poisoned as p:
            return ("error", p.error)
        except BaseException:
            return ("error", WorkerError(-1, self.rank, self.names.get(fid, "?"),
                                         traceback.format_exc()))
        out = tree_map(_meta_leaf if probe else _local_copy, out)
        buf = io.BytesIO()
        pickle.dump(out, buf, protocol=5)
        return ("ok", buf.getvalue())

    @endpoint
    def comms_rendezvous(self) -> tuple[str, int]:
        """(Rank 0 only.) Start the gloo world's store on this proc: the address its peers
        reach this proc at (its tcp listening IP; 127.0.0.1 for a local proc) and the port
        the store took (the kernel's choice: no other process can have it)."""
        if self.rank < 0:
            self._locate()
        host = _listening_ip() or "127.0.0.1"
        if self.store is None:
            self.store = dist.TCPStore(host, 0, self.world, is_master=True,
                                       wait_for_workers=False)
        return host, int(self.store.port)

    @endpoint
    def init_comms(self, addr: str, port: int) -> None:
        """Join the gloo world of this mesh (every worker at once: the controller casts it
        one-way, after rank 0 started the store at ``addr:port``); a failure is kept and
        raised by the first collective."""
        if self.rank < 0:
            self._locate()
        if self.joined:
            return
        if dist.is_initialized():  # another mesh's worker on this proc started its world
            self.comms_error = (
                "this proc already belongs to the gloo world of another device mesh (one "
                "that holds this mesh, e.g. the mesh this one was sliced from); a proc joins "
                "one world, so collectives on this mesh are not supported: reduce on the "
                "parent mesh, or to_mesh() the values to a mesh of other procs")
            return
        try:
            ifname = _interface_of(_listening_ip())
            if ifname is not None and "GLOO_SOCKET_IFNAME" not in os.environ:
                os.environ["GLOO_SOCKET_IFNAME"] = ifname  # else gloo takes the hostname's
            store = self.store or dist.TCPStore(addr, port, self.world, is_master=False)
            dist.init_process_group("gloo", store=store, rank=self.rank,
                                    world_size=self.world)
            self.joined = True
        except Exception:
            self.comms_error = traceback.format_exc()

    @endpoint
    def inbox_port(self) -> Any:
        """The port ``to_mesh`` sources send this worker's values to."""
        return self.inbox_of().port

    @endpoint
    def unreported(self, seen: list[int]) -> list[WorkerError]:
        """The errors of ops that failed here (after the ops sent so far), but those whose
        seq is in ``seen`` (errors some fetch already raised)."""
        skip = set(seen)
        return [e for e in self.failures if e.seq not in skip]

    @endpoint
    def table_size(self) -> int:
        """How many values this worker holds (tests check that drops free them)."""
        return len(self.table)

    # -- internals -------------------------------------------------------------------------
    def inbox_of(self) -> _p2p.Inbox:
        """This worker's inbox of transfers (opened the first time)."""
        if self.inbox is None:
            self.inbox = _p2p.Inbox()
        return self.inbox

    def _define(self, fid: int, spec: str | bytes) -> None:
        name = spec if isinstance(spec, str) else "<pickled function>"
        try:
            fn = resolve_function(spec)
            name = getattr(fn, "__qualname__", None) or name
        except Exception:
            fn = _Missing(spec, traceback.format_exc())
        self.fns[fid] = fn
        self.names[fid] = str(spec) if isinstance(spec, str) else name

    def _op(self, msg: tuple[Any, ...]) -> None:
        _, seq, fid, args, kwargs, results, mutates = msg
        try:
            out = self.fns[fid](*self._resolve(args), **self._resolve(kwargs))
        except _Poisoned as p:
            err = p.error
        except BaseException:
            err = WorkerError(seq, self.rank, self.names.get(fid, "?"), traceback.format_exc())
            if len(self.failures) < MAX_FAILURES:
                self.failures.append(err)
        else:
            table = self.table
            if len(results) == 1 and isinstance(out, torch.Tensor):
                table[results[0]] = out
                return
            for ref, leaf in zip(results, tree_leaves(out)):
                if ref is not None:
                    table[ref] = leaf
            return
        for ref in results:
            if ref is not None:
                self.table[ref] = err
        for ref in mutates:
            self.table[ref] = err

    def _resolve(self, x: Any) -> Any:
        t = type(x)
        if t is Ref:
            v = self.table[x.id]
            if type(v) is WorkerError:
                raise _Poisoned(v)
            return v
        if t is tuple:
            return tuple([self._resolve(i) for i in x])
        if t is list:
            return [self._resolve(i) for i in x]
        if t is dict:
            return {k: self._resolve(v) for k, v in x.items()}
        if t is GroupRef:
            return self.group(x.dims)
        if t is OpaqueRef:
            return OpaqueRef._create(self._resolve(x._key))
        if t is RankRef:
            return self.linear_rank(x.dims)
        return x

    def linear_rank(self, dims: tuple[str, ...]) -> int:
        """This worker's row-major rank over ``dims`` (all dims when empty)."""
        r = 0
        for d in dims or self.labels:
            r = r * self.sizes[d] + self.coords[d]
        return r

    def group(self, dims: tuple[str, ...]) -> Any:
        """The process group of this worker's split over ``dims`` (made on first use, in
        the same order on every rank: every rank runs the same stream)."""
        dims = tuple(d for d in self.labels if d in (dims or self.labels))
        if dims in self.groups:
            return self.groups[dims]
        if not self.joined:
            raise RuntimeError(f"collectives could not start on this worker:\n"
                               f"{self.comms_error}")
        others = [d for d in self.labels if d not in dims]
        mine = None
        for key in _product([self.sizes[d] for d in others]):
            fixed = dict(zip(others, key))
            ranks = [self._rank_of({**fixed, **dict(zip(dims, c))})
                     for c in _product([self.sizes[d] for d in dims])]
            g = dist.new_group(ranks)
            if self.rank in ranks:
                mine = g
        self.groups[dims] = mine
        return mine

    def _rank_of(self, coords: dict[str, int]) -> int:
        r = 0
        for d in self.labels:
            r = r * self.sizes[d] + coords[d]
        return r


def rank_value(rank: int) -> torch.Tensor:
    """The value of ``rank_tensor``: this worker's rank, resolved from a ``RankRef``."""
    return torch.tensor(rank, dtype=torch.int64)


def _product(sizes: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for s in sizes:
        out = [(*p, i) for p in out for i in range(s)]
    return out


class TensorMeta(tuple):  # type: ignore[type-arg,unused-ignore]
    """(shape, stride, dtype) of a tensor a probed function returned."""


def _meta_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return TensorMeta((tuple(x.shape), tuple(x.stride()), x.dtype))
    return x


def _local_copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().clone() if x.is_cuda else x.detach().clone()
    return x
