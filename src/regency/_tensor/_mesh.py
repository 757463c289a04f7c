"""``DeviceMesh``: the controller's side of one mesh's op stream (one per proc mesh slice).

It owns the workers (one ``TensorWorker`` per proc), the buffer of messages not yet sent,
the ref and seq counters, the queued deletes and the controller frames of recent ops. The
buffer goes to every worker as one one-way ``broadcast`` when it is full and before any
fetch; the runtime's per-sender FIFO keeps a fetch behind the ops before it.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import config
from .._api._future import Future
from .._api._process import runtime
from .._api._state import api_state
from .._api._value_mesh import ValueMesh
from .._runtime._completion import Completion
from ..errors import SupervisionError
from . import _active, _unfetched
from ._devices import host_ranks, local_rank
from ._errors import Frames, NotADim, RemoteException, format_frames
from ._messages import DEFINE, DELETE, OP, WorkerError
from ._worker import TensorWorker

__all__ = ["DeviceMesh", "device_mesh_of"]

BATCH = 512
KEEP_FRAMES = 65536
_SKIP = ("/torch/", "/regency/_")
_coalescing = [0]
_meshes: dict[tuple[str, tuple[int, ...], tuple[str, ...]], DeviceMesh] = {}
_by_id: dict[int, DeviceMesh] = {}


def device_mesh_of(procs: Any) -> DeviceMesh:
    """The device mesh of a proc mesh (its workers are spawned the first time)."""
    key = (procs._uid, tuple(procs._shape.ranks()), tuple(procs._shape.labels))
    mesh = _meshes.get(key)
    if mesh is None:
        mesh = _meshes[key] = DeviceMesh(procs)
    return mesh


def _frames() -> Frames:
    f: Any = sys._getframe(2)
    out: list[tuple[Any, int]] = []
    while f is not None and len(out) < 4:
        code = f.f_code
        name = code.co_filename
        if not (_SKIP[0] in name or _SKIP[1] in name):
            out.append((code, f.f_lineno))
        f = f.f_back
    return tuple(out)


def gpu_slots(procs: Any) -> list[int]:
    """The GPU slot of each proc of ``procs`` (by its rank in ``procs``): its ``gpus``
    coordinate in the proc mesh it was spawned as (a slice keeps its procs' slots), else its
    index among that mesh's procs on the same host. Workers take it modulo their host's
    device count."""
    record = api_state(runtime()).proc_meshes.get(procs._uid)
    root = record.shape if record is not None else procs._shape
    agents = procs._host_agents
    root_ranks = root.ranks()
    on_host = dict(zip(root_ranks, host_ranks([agents[g] if g < len(agents) else g
                                               for g in root_ranks])))
    return [local_rank(root.coordinates(g), on_host[g]) for g in procs._shape.ranks()]


class DeviceMesh:
    """The tensor engine of one proc mesh: issue ops, fetch values."""

    def __init__(self, procs: Any) -> None:
        self.procs = procs
        self.labels: tuple[str, ...] = tuple(procs._shape.labels)
        self.sizes: dict[str, int] = dict(procs.sizes)
        self.workers = procs.spawn("tensor_engine", TensorWorker, gpu_slots(procs))
        self._buffer: list[tuple[Any, ...]] = []
        self._deletes: list[int] = []
        self._fn_ids: dict[Any, int] = {}
        self._frames: dict[int, Frames] = {}
        self._next_ref = 0
        self._seq = 0
        self._comms = False
        self._addr_ranks: dict[str, int] | None = None
        self.id = len(_by_id) + 1
        _by_id[self.id] = self
        self.seen: set[int] = set()  # seqs of failed ops whose error a fetch raised
        self.values_received = 0  # replies that carried values to the controller (tests)
        self._inboxes: list[Any] | None = None
        self.stopped = False  # its unobserved errors were reported (its procs stop)
        self._activation: _active.Activation | None = None  # its last ``activate()``
        _unfetched.install()

    # -- activation ------------------------------------------------------------------------
    def activate(self) -> _active.Activation:
        """Torch ops run on every rank of this mesh from now on: until the end of the
        ``with`` block this is used in, or :meth:`deactivate`."""
        self._activation = _active.Activation(self)
        return self._activation

    def deactivate(self) -> None:
        """End the last activation of this mesh (one made without ``with``)."""
        activation, self._activation = self._activation, None
        if activation is not None:
            activation.close()

    # -- Monarch's DeviceMesh surface -------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        """The mesh's dimension names, in order."""
        return self.labels

    @property
    def extent(self) -> Any:
        """The mesh's ``Extent`` (names and sizes)."""
        return self.procs.extent

    def size(self, dims: str | tuple[str, ...] | list[str] | None = None) -> int:
        """The number of ranks along ``dims`` (all dims when None)."""
        names = self.labels if dims is None else (dims,) if isinstance(dims, str) else dims
        total = 1
        for d in names:
            if d not in self.sizes:
                raise ValueError(f"{d!r} is not a dimension of the mesh {self.labels}")
            total *= self.sizes[d]
        return total

    def rank(self, dims: str | tuple[str, ...] | list[str]) -> Any:
        """A remote tensor of each rank's coordinate along ``dims`` (``rank_tensor``)."""
        from ._fetch import rank_tensor

        return rank_tensor(self, dims)

    def process_group(self, dims: str | tuple[str, ...]) -> Any:
        """The torch.distributed group over ``dims`` (``regency.process_group``)."""
        from ._collectives import process_group

        return process_group(self, dims)

    def slice(self, **coords: Any) -> DeviceMesh:
        """The device mesh of a slice of this mesh's procs (``mesh(hosts=0)`` too). Its
        workers are its own: a tensor of this mesh moves there with ``slice_mesh``."""
        return device_mesh_of(self.procs.slice(**coords))

    __call__ = slice

    def flatten(self, name: str) -> DeviceMesh:
        """This mesh's procs with their dimensions flattened into one named ``name`` (a
        device mesh with workers of its own)."""
        return device_mesh_of(self.procs.flatten(name))

    # -- issuing ---------------------------------------------------------------------------
    def new_ref(self) -> int:
        """A fresh id for a value."""
        self._next_ref += 1
        return self._next_ref

    def function_id(self, key: Any, spec: str | bytes) -> int:
        """The id workers know the function ``key`` by (named once, in the stream)."""
        fid = self._fn_ids.get(key)
        if fid is None:
            fid = self._fn_ids[key] = len(self._fn_ids)
            self._buffer.append((DEFINE, fid, spec))
        return fid

    def issue(self, fid: int, args: Any, kwargs: Any, results: list[int | None],
              mutates: list[int]) -> int:
        """Append one op to the stream; its seq."""
        seq = self._seq = self._seq + 1
        frames = self._frames
        frames[seq] = _frames()
        if len(frames) > KEEP_FRAMES:
            del frames[next(iter(frames))]
        buf = self._buffer
        buf.append((OP, seq, fid, args, kwargs, results, mutates))
        if len(buf) >= BATCH and not _coalescing[0]:
            self.flush()
        return seq

    def issue_message(self, kind: int, fields: tuple[Any, ...], flush: bool = True) -> int:
        """Append ``(kind, seq, *fields)`` to the stream (with the caller's frames); its seq.
        ``flush=False`` never sends from here (for use from finalizers)."""
        seq = self._seq = self._seq + 1
        self._frames[seq] = _frames()
        self._buffer.append((kind, seq, *fields))
        if flush and len(self._buffer) >= BATCH and not _coalescing[0]:
            self.flush()
        return seq

    def worker_ranks(self, addrs: Any) -> frozenset[int]:
        """The ranks of this mesh's workers on the procs at ``addrs``.

        Raises:
            ValueError: a proc is not part of this mesh.
        """
        table = self._addr_ranks
        if table is None:
            procs = self.procs
            table = self._addr_ranks = {
                procs._proc_addrs[g]: i for i, g in enumerate(procs._shape.ranks())}
        missing = [a for a in addrs if a not in table]
        if missing:
            raise ValueError(
                f"remote tensors of {self!r} were sent to actors on procs outside that mesh "
                f"({len(missing)} of {len(addrs)}): an actor gets its own proc's local "
                "tensor, so call actors spawned on the procs of the tensors' mesh "
                "(procs.spawn(...)), or move the tensors there with to_mesh()")
        return frozenset(table[a] for a in addrs)

    def inbox_ports(self) -> list[Any]:
        """The inbox port of each worker, by rank (asked once: ``to_mesh`` sends there)."""
        if self._inboxes is None:
            self.flush()
            self._inboxes = list(self.workers.inbox_port.call().get().values())
        return self._inboxes

    def delete(self, ref: int) -> None:
        """Queue the deletion of ``ref`` (sent with the next batch)."""
        self._deletes.append(ref)

    def flush(self) -> None:
        """Send what is buffered to every worker, one-way."""
        buf, self._buffer = self._buffer, []
        if self._deletes:
            dels, self._deletes = self._deletes, []
            buf.append((DELETE, dels))
        if not buf:
            return
        try:
            self.workers.run.broadcast(buf)
        except SupervisionError:
            if any(msg[0] != DELETE for msg in buf):
                raise
            # only frees of values on procs that are stopped or dead: nothing to free

    def ensure_comms(self) -> None:
        """Start the gloo world of this mesh's workers, once: rank 0's worker starts the
        store on its host and says where (the one wait, the first time), then every worker
        joins (one-way, before later ops). Works across hosts."""
        if self._comms:
            return
        self.flush()
        zero = self.workers.slice(**dict.fromkeys(self.labels, 0)) if self.labels \
            else self.workers
        timeout = float(config.get("collective_timeout"))
        addr, port = zero.comms_rendezvous.call_one(timeout).get()
        self.workers.init_comms.broadcast(addr, port, timeout)
        self._comms = True

    # -- fetching --------------------------------------------------------------------------
    def rank_of(self, coords: dict[str, int]) -> int:
        """The rank (in this mesh) at ``coords``; every dim must be given."""
        missing = [d for d in self.labels if d not in coords]
        extra = [d for d in coords if d not in self.sizes]
        if missing or extra:
            error = NotADim if extra else ValueError  # as Monarch's: KeyError, ValueError
            raise error(f"fetch_shard needs a coordinate for every mesh dim {self.labels}"
                        f"; missing {missing}, unknown {extra}")
        r = 0
        for d in self.labels:
            c = coords[d]
            if not 0 <= c < self.sizes[d]:
                raise ValueError(f"coordinate {d}={c} is out of range 0..{self.sizes[d] - 1}")
            r = r * self.sizes[d] + c
        return r

    def fetch(self, tree: Any, coords: dict[str, int]) -> Future[Any]:
        """A Future of the value of ``tree`` (refs inside) on the rank at ``coords``."""
        if _coalescing[0]:
            raise RuntimeError("cannot fetch inside coalescing(): the block's messages are "
                               "sent at its end; fetch after it")
        self.flush()
        member = self.workers.slice(**coords) if coords else self.workers
        call = member.fetch.call_one(tree)
        done = Completion(f"fetch_shard at {coords}")
        call._completion.add_done_callback(lambda c: self._decode(c, done))
        return Future._from(done)

    def call_value(self, fid: int, args: Any, kwargs: Any, probe: bool,
                   coords: dict[str, int]) -> Future[Any]:
        """A Future of a function's value on the rank at ``coords`` (see the worker's)."""
        self.flush()
        member = self.workers.slice(**coords) if coords else self.workers
        call = member.call_value.call_one(fid, args, kwargs, probe)
        done = Completion(f"remote function value at {coords}")
        call._completion.add_done_callback(lambda c: self._decode(c, done))
        return Future._from(done)

    def kept_meta(self, key: int, coords: dict[str, int]) -> Future[Any]:
        """A Future of what the ``.rref()`` value kept under ``key`` looks like on the rank
        at ``coords`` (a tree with ``TensorMeta`` leaves for its tensors)."""
        self.flush()
        member = self.workers.slice(**coords) if coords else self.workers
        call = member.kept_meta.call_one(key)
        done = Completion(f"the shape of an rref value at {coords}")
        call._completion.add_done_callback(lambda c: self._decode(c, done))
        return Future._from(done)

    def call_values(self, fid: int, args: Any, kwargs: Any, probe: bool = False) -> Future[Any]:
        """A Future of the ValueMesh of a function's value on every rank (with ``probe``,
        of its outputs' metadata, as ``call_value``'s)."""
        self.flush()
        call = self.workers.call_value.call(fid, args, kwargs, probe)
        done = Completion("remote function values")
        call._completion.add_done_callback(lambda c: self._decode_mesh(c, done))
        return Future._from(done)

    def _decode_mesh(self, src: Completion, dst: Completion) -> None:
        exc = src.exception()
        if exc is not None:
            dst.set_exception(exc)
            return
        replies = src.outcome()
        self.values_received += 1
        values = []
        try:
            with _disable_current_modes():
                for status, value in replies.values():
                    if status == "error":
                        dst.set_exception(self.remote_exception(value))
                        return
                    values.append(pickle.load(io.BytesIO(value)))
            dst.set_result(ValueMesh(replies._shape, values))
        except BaseException as e:
            dst.set_exception(e)

    def _decode(self, src: Completion, dst: Completion) -> None:
        exc = src.exception()
        if exc is not None:
            dst.set_exception(exc)
            return
        status, value = src.outcome()
        self.values_received += 1
        if status == "error":
            dst.set_exception(self.remote_exception(value))
            return
        try:
            with _disable_current_modes():
                dst.set_result(pickle.load(io.BytesIO(value)))
        except BaseException as e:
            dst.set_exception(e)

    def remote_exception(self, err: WorkerError) -> RemoteException:
        """The controller's view of a worker's error (marked as seen: not reported at exit),
        naming the ranks of this mesh known to have died (a collective with a dead rank fails
        on the others)."""
        origin = _by_id.get(err.mesh, self) if err.mesh else self
        origin.seen.add(err.seq)
        return RemoteException(err.seq, err.rank, err.fn, err.message + self._deaths(),
                               format_frames(origin._frames.get(err.seq)))

    def _deaths(self) -> str:
        dead = runtime().dead_addrs
        if not dead:
            return ""
        addrs = self.procs._proc_addrs
        lines = [f"rank {r} of this mesh ({self._coords_text(r)}, proc {addrs[g]}) has "
                 f"died ({dead[addrs[g]].removeprefix('the proc ')})"
                 for r, g in enumerate(self.procs._shape.ranks()) if addrs[g] in dead]
        if not lines:
            return ""
        return ("\nNote: " + "\nNote: ".join(lines) + "\n(an op that exchanges data with a "
                "dead rank, such as a collective, fails on the others; see its supervision "
                "error for why it died)\n")

    def _coords_text(self, rank: int) -> str:
        out = []
        for d in reversed(self.labels):
            rank, c = divmod(rank, self.sizes[d])
            out.append(f"{d}={c}")
        return ", ".join(reversed(out))

    def table_sizes(self) -> list[int]:
        """How many values each worker holds (after the ops sent so far)."""
        self.flush()
        return list(self.workers.table_size.call().get().values())

    def __repr__(self) -> str:
        dims = ", ".join(f"{d}={s}" for d, s in self.sizes.items())
        return f"<DeviceMesh {dims}>"


@contextlib.contextmanager
def coalescing() -> Iterator[None]:
    """Send the messages of the block together at its end (no fetch inside)."""
    _coalescing[0] += 1
    try:
        yield
    finally:
        _coalescing[0] -= 1
        if not _coalescing[0]:
            for mesh in list(_meshes.values()):
                mesh.flush()


_ = torch  # torch must be importable here: the workers import it
