"""``TensorWorker``: the actor on every proc of an active mesh that runs the op stream.

It keeps a table ref -> local value. Ops run in the order they were issued; an op that fails
stores a :class:`WorkerError` under its results and the inputs it mutates, and an op that
reads such an error stores it too without running, so the error reaches every dependent
value and nothing else. ``run`` never raises: the actor stays healthy whatever the ops do.

An op with a process group among its arguments (``reduce``, a ``remote`` function given
``process_group(...)``) is a collective: its group's ranks must all run it or none. Before
running it the ranks agree over the group whether any of them holds an error in its inputs;
if one does, none runs it and every rank stores that rank's error (``_agreement``).
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_leaves, tree_map

from .._api._actor import Actor, endpoint
from .._api._context import context
from .._api._process import runtime
from ..spmd import _interface_of, _listening_ip
from . import _agreement, _broker, _comm_ops, _extras, _p2p
from ._agreement import InputFailed
from ._devices import Lifted, choose_backend, device_index, uses_nccl
from ._extras import OpaqueRef
from ._messages import (
    ACTOR,
    BIND,
    BORROW,
    BORROW_DROP,
    DEFINE,
    DELETE,
    KEEP,
    OP,
    RECV,
    SEND,
    GroupRef,
    RankRef,
    Ref,
    WorkerError,
)

__all__ = ["TensorWorker", "resolve_function"]

MAX_FAILURES = 100  # failed ops a worker remembers for the report at exit


#: raised when an argument holds the error of an earlier op (here, or on another rank of
#: the op's process group)
_Poisoned = InputFailed


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


_DEVICE = torch.device
#: seconds a rank waits in a collective for the others (config ``collective_timeout``)
DEFAULT_TIMEOUT = 600.0


class TensorWorker(Actor):
    """One per proc of a device mesh: runs batches of ops against a table of local values.

    ``gpu_slots[r]`` is the GPU slot of the proc of rank ``r`` (see ``_devices``): with CUDA,
    this worker's device is ``cuda:<slot mod device count>``, made the proc's current device,
    and every CUDA device named in an op (``cuda``, ``cuda:0``: what the controller's fake
    tensors say) means it.
    """

    def __init__(self, gpu_slots: list[int] | None = None) -> None:
        self.gpu_slots = gpu_slots or []
        self.device: torch.device | None = None  # this worker's CUDA device, if any
        self.rank = -1
        self.coords: dict[str, int] = {}
        self.labels: tuple[str, ...] = ()
        self.sizes: dict[str, int] = {}
        self.world = 1
        self.table: dict[int, Any] = {}
        self.fns: dict[int, Callable[..., Any]] = {}
        self.names: dict[int, str] = {}
        self.groups: dict[tuple[str, ...], Any] = {}
        self.device_ids: list[Any] | None = None  # by rank, gathered with the first group
        self.comms_error = "init_comms was never received"
        self.joined = False  # whether this worker started the proc's gloo world
        self.kept: dict[int, Any] = {}  # rref values whose outputs are not known yet
        self.store: Any = None  # rank 0: the gloo world's TCPStore, served by this proc
        self.inbox: _p2p.Inbox | None = None  # where to_mesh values arrive (made on demand)
        self.failures: list[WorkerError] = []  # ops that raised here (not those poisoned)
        _extras.on_worker[0] = True  # OpaqueRef values are readable in this proc
        self.timeout = timedelta(seconds=DEFAULT_TIMEOUT)  # of every collective (init_comms)
        self._used_groups: list[Any] | None = None  # the groups the op being resolved names

    def _locate(self) -> None:
        """Where this worker is in its mesh: the actor's own rank in the mesh it was spawned
        on, never the rank of the message being handled (a message sent to a slice, such
        as rank 0's ``comms_rendezvous`` or a ``fetch_shard``, has a rank in that slice,
        which may be the first message a worker gets)."""
        point = context().actor_instance.rank
        self.rank = point.rank
        self.coords = dict(point)
        self.labels = tuple(point.extent.labels)
        self.sizes = dict(zip(self.labels, point.extent.sizes))
        self.world = 1
        for s in self.sizes.values():
            self.world *= s
        slot = self.gpu_slots[self.rank] if self.rank < len(self.gpu_slots) else self.rank
        try:
            index = device_index(slot, torch.cuda.device_count()) \
                if torch.cuda.is_available() else None
            if index is not None:
                torch.cuda.set_device(index)  # ``device="cuda"`` in remote functions
                self.device = torch.device("cuda", index)
        except Exception:  # CUDA unusable here: CUDA ops fail on this rank, as RemoteExceptions
            self.device = None

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
            elif kind == ACTOR:
                self._actor(msg)
            elif kind == BIND:
                self._bind(msg)
            elif kind == BORROW:
                _, _, ref, src = msg
                self.table[ref] = self.table.get(src, WorkerError(
                    msg[1], self.rank, "borrow", f"the borrowed value {src} is not defined "
                    "on this worker (was it dropped?)"))
            elif kind == BORROW_DROP:
                err = self.table.get(msg[2])
                if type(err) is WorkerError:  # the lender's values hold the borrow's error
                    for ref in msg[3]:
                        self.table[ref] = err
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
            out = self._invoke(fid, args, kwargs)
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
    def kept_meta(self, key: int) -> tuple[str, Any]:
        """What the ``.rref()`` value kept under ``key`` looks like: ``("ok", pickled tree
        with TensorMeta for tensors)`` or ``("error", WorkerError)``."""
        value = self.kept.get(key)
        if value is None:
            return ("error", WorkerError(-1, self.rank, "rref", f"no value kept for call "
                                         f"{key} on this worker"))
        if type(value) is WorkerError:
            return ("error", value)
        buf = io.BytesIO()
        pickle.dump(tree_map(_meta_leaf, value), buf, protocol=5)
        return ("ok", buf.getvalue())

    @endpoint
    def comms_rendezvous(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[str, int]:
        """(Rank 0 only.) Start the gloo world's store on this proc: the address its peers
        reach this proc at (its tcp listening IP; 127.0.0.1 for a local proc) and the port
        the store took (the kernel's choice: no other process can have it). ``timeout``:
        how long the store waits for a peer."""
        if self.rank < 0:
            self._locate()
        host = _listening_ip() or "127.0.0.1"
        if self.store is None:
            self.store = dist.TCPStore(host, 0, self.world, is_master=True,
                                       wait_for_workers=False,
                                       timeout=timedelta(seconds=timeout))
        return host, int(self.store.port)

    @endpoint
    def init_comms(self, addr: str, port: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Join the gloo world of this mesh (every worker at once: the controller casts it
        one-way, after rank 0 started the store at ``addr:port``); a failure is kept and
        raised by the first collective. ``timeout``: how long a rank waits in a collective
        (or the rendezvous) for the others."""
        if self.rank < 0:
            self._locate()
        if self.joined:
            return
        self.timeout = timedelta(seconds=timeout)
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
            store = self.store or dist.TCPStore(addr, port, self.world, is_master=False,
                                                timeout=self.timeout)
            dist.init_process_group("gloo", store=store, rank=self.rank,
                                    world_size=self.world, timeout=self.timeout)
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

    def _invoke(self, fid: int, args: Any, kwargs: Any) -> Any:
        """Call function ``fid`` on the resolved arguments; a collective (an op naming a
        process group) first agrees with its group on whether every rank can run it.

        Raises:
            _Poisoned: an argument here, or on another rank of the op's group, holds an error.
        """
        fn = self.fns[fid]
        self._used_groups = None
        try:
            a = self._resolve(args)
            k = self._resolve(kwargs)
        except _Poisoned as p:
            if fn is _agreement.reduce:  # joins with a placeholder, then raises
                return fn(*self._keep_errors(args), **self._keep_errors(kwargs))
            refs = [x for x in tree_leaves((args, kwargs)) if isinstance(x, GroupRef)]
            if refs:  # the other ranks are about to wait for this one: tell them why not
                try:
                    groups = [self.group(r.dims) for r in refs]
                except Exception:
                    raise p from None  # no collectives here at all: nobody waits for us
                _agreement.agree(_one_group(groups), p.error)
            raise
        if self._used_groups is not None and fn is not _agreement.reduce:
            error = _agreement.agree(_one_group(self._used_groups), None)
            if error is not None:
                raise _Poisoned(error)
        return fn(*a, **k)

    def _keep_errors(self, x: Any) -> Any:
        """``_resolve``, but a ``Ref`` to an error gives the ``WorkerError`` itself."""
        t = type(x)
        if t is Ref:
            return self.table[x.id]
        if t is tuple or t is list:
            return t(self._keep_errors(i) for i in x)
        if t is dict:
            return {k: self._keep_errors(v) for k, v in x.items()}
        return self._resolve(x)

    def _op(self, msg: tuple[Any, ...]) -> None:
        _, seq, fid, args, kwargs, results, mutates = msg
        try:
            out = self._invoke(fid, args, kwargs)
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

    def _actor(self, msg: tuple[Any, ...]) -> None:
        """Hand the values of a call's tensors to the actor on this proc; for ``.rref()``,
        wait for the endpoint's value and keep its tensors (see ``_broker``)."""
        _, seq, key, refs, ranks, results, mutates, uid, name = msg
        if self.rank not in ranks:
            return
        values: Any
        try:
            values = self._resolve(refs)
        except _Poisoned as p:
            values = p.error
        except KeyError as exc:
            values = WorkerError(seq, self.rank, name, f"KeyError: {exc}: an argument is not "
                                 "defined on this worker (was it dropped?)")
        _broker.put_args(key, values)
        if results is None:
            return
        if type(values) is WorkerError:
            err = values
        else:
            status, out = _broker.take_result(key, _Gone(uid, name))
            if results == KEEP:
                self.kept[key] = out if status == "ok" else WorkerError(seq, self.rank, name,
                                                                         out)
                return
            if status == "ok":
                leaves = [x for x in tree_leaves(out) if isinstance(x, torch.Tensor)]
                if len(leaves) == len(results):
                    for ref, leaf in zip(results, leaves):
                        self.table[ref] = leaf
                    return
                out = (f"{name} returned {len(leaves)} tensor(s), but its propagate function "
                       f"said {len(results)}: make them agree")
            err = WorkerError(seq, self.rank, name, out)
        if results == KEEP:
            self.kept[key] = err
            return
        for ref in (*results, *mutates):
            self.table[ref] = err

    def _bind(self, msg: tuple[Any, ...]) -> None:
        """Store the tensors of a kept ``.rref()`` value under the refs the controller made
        once it learnt the value's shape (or forget it: ``refs`` None)."""
        _, seq, key, refs = msg
        value = self.kept.pop(key, None)
        if refs is None:
            return
        if value is None or type(value) is WorkerError:
            err = value or WorkerError(seq, self.rank, "rref", "the value was not kept")
        else:
            leaves = [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]
            if len(leaves) == len(refs):
                for ref, leaf in zip(refs, leaves):
                    self.table[ref] = leaf
                return
            err = WorkerError(seq, self.rank, "rref", f"the endpoint returned {len(leaves)} "
                              f"tensor(s) here but {len(refs)} on the first rank: with "
                              "cached propagation every rank must return the same structure")
        for ref in refs:
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
            g = self.group(x.dims)
            if self._used_groups is None:
                self._used_groups = [g]
            else:
                self._used_groups.append(g)
            return g
        if t is OpaqueRef:
            return OpaqueRef._create(self._resolve(x._key))
        if t is RankRef:
            return self.linear_rank(x.dims)
        if t is _DEVICE:
            return self.device if x.type == "cuda" and self.device is not None else x
        if t is Lifted:
            return x.value.to(self._resolve(x.device))
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
        devices = self._devices()
        nccl = dist.is_nccl_available()
        others = [d for d in self.labels if d not in dims]
        mine = None
        for key in _product([self.sizes[d] for d in others]):
            fixed = dict(zip(others, key))
            ranks = [self._rank_of({**fixed, **dict(zip(dims, c))})
                     for c in _product([self.sizes[d] for d in dims])]
            backend = choose_backend([devices[r] for r in ranks], nccl)
            g = dist.new_group(ranks, backend=backend, timeout=self.timeout)
            if self.rank in ranks:
                mine = g
                if uses_nccl(backend):
                    _comm_ops.NCCL_GROUPS.add(id(g))
        self.groups[dims] = mine
        return mine

    def _devices(self) -> list[Any]:
        """The identity of every rank's CUDA device (``None``: no CUDA), gathered over the
        world once, on every rank at the same point of the stream (the first group)."""
        if self.device_ids is None:
            mine = None
            if self.device is not None:
                props = torch.cuda.get_device_properties(self.device)
                uuid = getattr(props, "uuid", None)
                mine = str(uuid) if uuid is not None else \
                    f"{socket.gethostname()}/cuda:{self.device.index}"
            out: list[Any] = [None] * self.world
            dist.all_gather_object(out, mine)
            self.device_ids = out
        return self.device_ids

    def _rank_of(self, coords: dict[str, int]) -> int:
        r = 0
        for d in self.labels:
            r = r * self.sizes[d] + coords[d]
        return r


class _Gone:
    """Why the actor ``uid`` on this proc will never run a call (None: it still may). An
    actor not here yet may still be starting: it counts as gone after ``MISSING_S``."""

    MISSING_S = 30.0

    def __init__(self, uid: str, name: str) -> None:
        self.uid = uid
        self.name = name
        self.missing_since: float | None = None

    def __call__(self) -> str | None:
        cell = runtime().cells.get(self.uid)
        behavior = getattr(cell, "behavior", None) if cell is not None else None
        if behavior is None:
            now = time.monotonic()
            if self.missing_since is None:
                self.missing_since = now
            if now - self.missing_since < self.MISSING_S:
                return None
            return f"{self.name} could not run: its actor is not on this proc (stopped?)"
        self.missing_since = None
        if behavior.failure is not None:
            return f"{self.name} could not run: its actor failed: {behavior.failure.cause}"
        if behavior.stop_requested is not None:
            return f"{self.name} could not run: its actor stopped ({behavior.stop_requested})"
        return None


def _one_group(groups: list[Any]) -> Any:
    """The group an op's ranks agree over: its group, or the world (``None``) when it names
    several."""
    return groups[0] if all(g is groups[0] for g in groups) else None


def rank_value(rank: int) -> torch.Tensor:
    """The value of ``rank_tensor``: this worker's rank, resolved from a ``RankRef``."""
    return torch.tensor(rank, dtype=torch.int64)


def _product(sizes: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for s in sizes:
        out = [(*p, i) for p in out for i in range(s)]
    return out


class TensorMeta(tuple):  # type: ignore[type-arg,unused-ignore]
    """(shape, stride, dtype, device type) of a tensor a probed function returned."""


def _meta_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return TensorMeta((tuple(x.shape), tuple(x.stride()), x.dtype, x.device.type))
    return x


def _local_copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().clone() if x.is_cuda else x.detach().clone()
    return x
