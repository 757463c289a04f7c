"""How an actor handles its messages: the behavior an actor cell runs.

One ``ActorBehavior`` per actor: it builds the user's object (``__init__`` as the first item
in the mailbox), looks up endpoints, binds the message's context (rank of the message within
the slice it was sent to), runs the endpoint, and answers the caller's port. Exceptions with a
caller become ``ActorError`` there and the actor lives on; anything else that escapes (an
exception in ``__init__`` or in a ``broadcast``, a ``BaseException``) fails the actor and is
reported to its owner.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import Any

from .._debug import _rank as _debug
from .._mesh import Extent, Point, Shape, Slice
from .._ratelog import notices
from .._runtime._cell import Limits
from .._runtime._pickling import loads
from .._runtime._runtime import Runtime
from .._supervision._reasons import actor_gone
from .._wire import _messages as m
from ..errors import DeadlineExceeded, MailboxFull, MeshFailure, SupervisionError
from ._actor import Actor, endpoints_of, is_async_actor
from ._context import Context, Instance, _current, set_context
from ._deadlines import seconds_text
from ._endpoint import TENSOR_CALL
from ._mailbox import limit_of
from ._ports import Port
from ._proc_mesh import proc_mesh_of
from ._sealed import seal
from ._waits import RecentPorts

#: (resolve, resolve_async), installed by the tensor engine's broker when a call brings
#: remote tensors: wait for their local values and put them in the arguments (ADR 0025).
tensor_call_hooks: Any = None

_monotonic = time.monotonic


class MessageContext(Context):
    """A context whose message rank is computed only when asked for."""

    def __init__(self, instance: Instance, cast: m.Cast, global_rank: int,
                 endpoint: str = "") -> None:
        self.actor_instance = instance
        self._cast = cast
        self.global_rank = global_rank
        self.endpoint = endpoint  # the endpoint this message runs (a breakpoint names it)
        self.concurrent = False  # a @concurrent_endpoint body: the mailbox keeps moving
        self.port: Any = None  # where its reply goes: which call it runs (``_waits``)
        self.waits: list[Any] = []  # the calls it has waited on for long (``_waits``)
        self.task: Any = None  # an async handler's own task: its awaits are its waits
        # the call its caller cancelled (``Future.cancel``): a port, so that a sync actor's
        # context, reused by its next message, is not cancelled with it
        self.cancelled_port: Any = None

    @property
    def cancelled(self) -> bool:
        """Whether the caller cancelled the call being handled."""
        port = self.cancelled_port
        return port is not None and port == self.port

    @cached_property
    def message_rank(self) -> Point:  # type: ignore[override]
        labels, offset, sizes, strides = self._cast
        shape = Shape(labels, Slice(offset, sizes, strides))
        return Point(shape.local_rank(self.global_rank), Extent(labels, sizes))


class ActorBehavior:
    """Runs one actor: construction, messages, supervision of what it owns, cleanup."""

    def __init__(self, rt: Runtime, msg: m.SpawnActor, cls: type[Actor], args: tuple[Any, ...],
                 kwargs: dict[str, Any], global_rank: int) -> None:
        self.rt = rt
        self.uid: str = msg.uid
        self.cls = cls
        self.args: tuple[Any, ...] | None = args
        self.kwargs: dict[str, Any] | None = kwargs
        self.g = global_rank
        shape: Shape = msg.shape
        self.local = shape.local_rank(global_rank)
        self.rank = shape.point(self.local)
        self.owner: str = msg.owner
        self.owner_uid: str | None = msg.owner_uid
        self.is_async = is_async_actor(self.cls)
        self.endpoints = endpoints_of(self.cls)
        self.mailbox_limit = limit_of(self.cls)
        self.class_name = f"{self.cls.__module__}.{self.cls.__qualname__}"
        self.instance = Instance(
            actor_id=f"{self.uid}{dict(self.rank)}", name=msg.name,
            class_name=self.class_name, rank=self.rank, proc_id=rt.address,
            creator=msg.creator, mesh_uid=self.uid, _proc_mesh=msg.proc_mesh,
            _stop=self.request_stop, _abort=self.abort, _proc=proc_mesh_of(rt),
        )
        self.context = Context(self.instance, self.rank)  # __init__: its own rank
        # __supervise__ and __cleanup__ run for no message: an empty rank, as in Monarch
        self.hook_context = Context(self.instance, Point(0, Extent([], [])))
        self.actor: Actor | None = None
        self.failure: MeshFailure | None = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stop_requested: str | None = None
        self.cleaned = False  # __cleanup__ ran (it runs at most once)
        self.before_reply: Callable[[], None] | None = None  # set by a sync actor's cell
        self._status = rt.status_page  # shared with the host agent: the endpoint in flight
        self.failed_exc: BaseException | None = None  # why it failed, for __cleanup__
        self.aborting: str | None = None  # Instance.abort(): fail once the message is done
        self._status_names: dict[str, bytes] = {}
        self._targets: dict[str, tuple[Any, bool]] = {}  # endpoint -> (bound method, explicit)
        self._own: Any = {}  # the actor's instance dict, once it exists
        self._ctx: MessageContext | None = None  # the context of the last message (sync)
        # what a wait probe asks (``_waits``): the serial message being handled, the
        # @concurrent_endpoint bodies running (by port), the calls from actors started
        self.current: MessageContext | None = None
        self.bodies: dict[Any, MessageContext] = {}
        self.started = RecentPorts()
        # calls cancelled before they started (``_cancel``): made by the first cancel
        self.cancelled: RecentPorts | None = None

    # -- construction ------------------------------------------------------------------------
    def setup_context(self) -> None:
        set_context(self.context)

    def init(self, ack: m.PortRef) -> None:
        """Construct the user's object (first item of the mailbox)."""
        try:
            obj = self.cls.__new__(self.cls)
            obj.__init__(*(self.args or ()), **(self.kwargs or {}))  # type: ignore[misc]
            self.actor = obj
            own = getattr(obj, "__dict__", None)
            self._own = own if own is not None else {}  # its attributes shadow its methods
        except BaseException as exc:
            self.fail(exc, "__init__")
        finally:
            self.args = self.kwargs = None
            self.rt.send_reply(ack, self.g, m.OK, None)

    # -- messages ----------------------------------------------------------------------------
    def handle(self, call: m.Call, frame: list[memoryview]) -> Any:
        """Handle one call (sync actors: runs it; async actors: returns a coroutine)."""
        if self.is_async:
            return self._handle_async(call, frame)
        port = call.port
        if port is not None and call.sender != "root":  # a call an actor may wait on
            self.started.add(port)
        if (self.failure is not None or self.actor is None
                or self.stop_requested is not None) and self._refuse(port, call.endpoint):
            return None
        name = call.endpoint
        ctx = self._ctx
        if ctx is None or ctx.endpoint != name or ctx._cast != call.cast:
            ctx = self._ctx = MessageContext(self.instance, call.cast, self.g, name)
        if _current.get(None) is not ctx:  # the last message's, when sent the same way
            _current.set(ctx)
        ctx.port = port
        self.current = ctx
        cancelled = self.cancelled  # looked at after ``current`` is set: ``cancel`` on the
        if cancelled is not None and port is not None and port in cancelled:  # loop adds
            cancelled.discard(port)  # first and looks at ``current`` second, so one of
            self.current = None      # the two sees the other
            return None  # its caller cancelled it: no one waits for it any more
        expires = call.expires
        if expires:
            if _monotonic() > expires:
                self.current = None
                self._expired(call)
                return None
            ctx.expires = expires  # cleared when it ends: hooks run in this context after
        status = self._status
        if status is not None:  # what the host agent reports if the proc dies meanwhile
            status[:128] = self._status_names.get(name) or self._running_record(name)
        explicit = False
        try:
            # The common case first, without a call to _prepare: a method kept from the
            # last message, answered by its return value.
            target = self._targets.get(name)
            if target is not None and not target[1] and name not in self._own:
                fn = target[0]
                args, kwargs = loads(frame[1], frame[2:])
            else:
                fn, explicit, args, kwargs = self._prepare(name, port, frame)
            if kwargs and TENSOR_CALL in kwargs:
                fn, args, kwargs = tensor_call_hooks[0](fn, args, kwargs, port)
            result = fn(*args, **kwargs)
        except Exception as exc:
            if _debug.armed:  # only from a breakpoint to the end of its call (or post-mortem)
                _debug.call_raised(exc)
            self._on_exception(exc, name, port, explicit)
        except BaseException as exc:
            self._on_fatal(exc, name, port)
        else:
            if _debug.armed:  # the session ends before the caller gets the result
                _debug.call_ended()
            if port is not None and not explicit:
                if self.before_reply is not None:
                    self.before_reply()
                try:
                    self.rt.send_reply(port, self.g, m.OK, result)
                except Exception as exc:
                    self._unpicklable(port, exc, name)
        finally:
            self.current = None
            if expires:
                ctx.expires = 0.0
            if _debug.armed:
                _debug.call_ended()
            if self._status is not None:
                self._status[:1] = b"\0"  # nothing in flight
        if self.aborting is not None:  # per message: only a test of one attribute
            self._apply_abort()
        if self.failure is not None and not self.cleaned:
            self.cleanup(self.failed_exc)
        return None

    async def _handle_async(self, call: m.Call, frame: list[memoryview]) -> None:
        port = call.port
        if port is not None and call.sender != "root":  # a call an actor may wait on
            self.started.add(port)
        if self._refuse(port, call.endpoint):
            return
        name = call.endpoint
        ep = self.endpoints.get(name)
        if ep is not None and ep.concurrent:
            task = asyncio.get_running_loop().create_task(self._run_async(call, frame, True))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            await asyncio.sleep(0)  # let the body start before the next message
            return
        await self._run_async(call, frame)

    async def _run_async(self, call: m.Call, frame: list[memoryview],
                         concurrent: bool = False) -> None:
        port, name = call.port, call.endpoint
        cancelled = self.cancelled
        if cancelled is not None and port is not None and port in cancelled:
            cancelled.discard(port)
            return  # its caller cancelled it before it started
        expires = call.expires
        if expires and _monotonic() > expires:
            self._expired(call)
            return
        if self._status is not None:
            self._say_running(name)
        ctx = MessageContext(self.instance, call.cast, self.g, name)
        if expires:
            ctx.expires = expires
        ctx.concurrent = concurrent
        ctx.port = port
        ctx.task = asyncio.current_task()
        set_context(ctx)
        if concurrent:
            if port is not None:
                self.bodies[port] = ctx
        else:
            self.current = ctx
        explicit = False
        try:
            fn, explicit, args, kwargs = self._prepare(name, port, frame)
            if kwargs and TENSOR_CALL in kwargs:
                fn, args, kwargs = await tensor_call_hooks[1](fn, args, kwargs, port)
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            if _debug.armed:  # only from a breakpoint to the end of its call (or post-mortem)
                _debug.call_raised(exc)
            self._on_exception(exc, name, port, explicit)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                self._on_fatal(exc, name, port)
            elif ctx.cancelled and _cancels(ctx.task) <= 1:
                pass  # its caller cancelled it (``cancel``), and no one waits for a reply
            elif _cancels(ctx.task) == 0:
                # not a cancellation of this task: something it awaited was cancelled (a
                # task shared with a call its caller cancelled, say): this call's error
                self._on_exception(exc, name, port, explicit)
            else:
                self._on_fatal(exc, name, port)  # the actor's task itself is cancelled
        else:
            if _debug.armed:  # the session ends before the caller gets the result
                _debug.call_ended()
            if port is not None and not explicit:
                self._reply(port, result, name)
        finally:
            if concurrent:
                self.bodies.pop(port, None)
            else:
                self.current = None
            if ctx.cancelled:
                _uncancel(ctx.task)
            if expires:  # the actor's task stays in this context: its hooks run there
                ctx.expires = 0.0
            if _debug.armed:
                _debug.call_ended()
            if self._status is not None:
                self._status[:1] = b"\0"  # nothing in flight
        if self.aborting is not None:  # per message: only a test of one attribute
            self._apply_abort()
        if self.failure is not None and not self.cleaned:
            await self._cleanup_async(self.failed_exc)

    def cancel(self, port: m.PortRef) -> None:
        """Stop the call that answers on ``port`` (loop thread, ``_cancel``): skip it when
        its turn comes if it has not started; if an async handler runs it, raise
        ``asyncio.CancelledError`` at its ``await``. A sync handler runs on to its end;
        its ``context().cancelled`` turns true."""
        cancelled = self.cancelled
        if cancelled is None:
            cancelled = self.cancelled = RecentPorts(_CANCELS_KEPT)
        cancelled.add(port)  # first, then look at what runs (see ``handle``)
        ctx = self.bodies.get(port)
        if ctx is None:
            current = self.current
            ctx = current if current is not None and current.port == port else None
        if ctx is None:
            return  # queued (or not here yet): skipped when its turn comes
        cancelled.discard(port)  # it runs: nothing to skip
        if not ctx.cancelled:
            ctx.cancelled_port = port  # what ``context().cancelled`` tells a sync endpoint
            if ctx.task is not None:
                ctx.task.cancel()

    def mailbox_limits(self) -> Limits | None:
        """What the actor's cell holds at most (its class's ``__mailbox_limit__``)."""
        limit = self.mailbox_limit
        if limit is None:
            return None
        refuse = self.mailbox_full if limit.when_full == "raise" else None
        return (limit.max_bytes or 0, limit.max_messages or 0, refuse)

    def mailbox_full(self, call: m.Call, held: int) -> None:
        """Refuse a call that came to a full mailbox (loop thread; ``when_full="raise"``)."""
        limit = self.mailbox_limit
        assert limit is not None
        text = (f"{self.uid}.{call.endpoint}() was refused at rank {self.g}: the actor's "
                f"mailbox is full ({held} call{'s' if held != 1 else ''} waiting; {limit!r})")
        if call.port is not None:
            self.rt.send_reply(call.port, self.g, m.RAW_ERROR, MailboxFull(text))
        else:
            notices.warning(f"{self.uid}.full", "regency: %s (a broadcast: dropped)", text)

    def _expired(self, call: m.Call) -> None:
        """Drop a call whose deadline passed while it waited its turn here, and say so: to
        its caller, or on the proc's stderr for a broadcast (``_deadlines``)."""
        late = _monotonic() - call.expires
        text = (f"{self.uid}.{call.endpoint}() was dropped at rank {self.g}: its deadline "
                f"({seconds_text(call.budget)} s) had passed when its turn came "
                f"({seconds_text(late)} s late)")
        if call.port is not None:
            self.rt.send_reply(call.port, self.g, m.RAW_ERROR, DeadlineExceeded(text))
        else:
            notices.warning(f"{self.uid}.{call.endpoint}", "regency: %s", text)

    def _prepare(self, name: str, port: Any, frame: list[memoryview]) -> tuple[Any, bool, Any, Any]:
        args, kwargs = loads(frame[1], frame[2:])
        target = self._targets.get(name)
        if target is None or name in self._own:
            target = self._target(name)
        fn, explicit = target
        if explicit:
            if port is None:
                port_obj: Any = _NullPort()
            else:
                port_obj = Port(port[0], port[1], self.g, once=True)
            args = (port_obj, *args)
        return fn, explicit, args, kwargs

    def _target(self, name: str) -> tuple[Any, bool]:
        """What runs ``name`` on the actor, and whether it answers on an explicit port.

        An endpoint's bound method is kept for the next message (a method of the class;
        looked up again whenever the instance has an attribute of that name)."""
        ep = self.endpoints.get(name)
        explicit = bool(ep and ep.explicit_response_port)
        fn = getattr(self.actor, name, None)
        if fn is None or not callable(fn):
            raise AttributeError(f"{self.class_name} has no endpoint or method {name!r}")
        if ep is not None and name not in self._own:  # not a stand-in (regency.testing's)
            self._targets[name] = (fn, explicit)
        return fn, explicit

    def _say_running(self, name: str) -> None:
        """Write the endpoint in flight where the host agent reads it if the proc dies."""
        assert self._status is not None
        self._status[:128] = self._status_names.get(name) or self._running_record(name)

    def _running_record(self, name: str) -> bytes:
        """The status-page record of ``name`` in flight, made once per endpoint."""
        raw = f"{self.class_name}.{name}".encode()[:127]
        data = self._status_names[name] = raw + b"\0" * (128 - len(raw))
        return data

    def _refuse(self, port: Any, endpoint: str) -> bool:
        if self.failure is None and self.actor is not None and self.stop_requested is None:
            return False
        if port is not None:
            if self.stop_requested is not None and self.failure is None:
                why, failed = self.stop_requested, False
            else:
                why = self.failure.cause if self.failure else "it was never constructed"
                failed = True
            msg = actor_gone(self.instance.name, endpoint, self.uid, self.local, why, failed)
            self.rt.send_reply(port, self.g, m.SUPERVISION, (msg, self.failure))
        return True

    def _reply(self, port: tuple[str, int], value: Any, name: str) -> None:
        try:
            self.rt.send_reply(port, self.g, m.OK, value)
        except Exception as exc:
            self._unpicklable(port, exc, name)

    def _unpicklable(self, port: tuple[str, int], exc: Exception, name: str) -> None:
        """Answer with an error: the result of ``name`` could not be sent. The caller's
        ``ActorError.exception`` is of the pickling error's type (Monarch's), when it can be
        made again with a text; a ``RuntimeError`` naming it otherwise."""
        text = f"the result of {name} could not be pickled: {type(exc).__name__}: {exc}"
        tb = ("Traceback (most recent call last):\n"  # its last line says what failed
              + "".join(traceback.format_tb(exc.__traceback__)) + f"{type(exc).__name__}: "
              f"{text}\n")
        try:
            sealed = seal(type(exc)(text))
        except Exception:  # an exception type that takes other arguments, or won't pickle
            sealed = None
        self.rt.send_reply(port, self.g, m.ACTOR_ERROR,
                           (sealed, type(exc).__name__, text, tb, self._label(name)))

    def _label(self, name: str) -> str:
        """``"<name>.<endpoint> on <actor id>"``: Monarch's words first (``Actor call w.step
        failed.``), then which member."""
        return f"{self.instance.name}.{name} on {self.instance.actor_id}"

    def _on_exception(self, exc: BaseException, name: str, port: Any, explicit: bool) -> None:
        if port is None or explicit:
            self.fail(exc, name)
            if port is not None:
                msg = f"{self._label(name)} raised instead of answering on its port: {exc!r}"
                self.rt.send_reply(port, self.g, m.SUPERVISION, (msg, self.failure))
            return
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        text = (type(exc).__name__, str(exc), tb, self._label(name))
        try:  # sealed: a caller that cannot rebuild it still gets its type and text
            self.rt.send_reply(port, self.g, m.ACTOR_ERROR, (seal(exc), *text))
        except Exception:
            self.rt.send_reply(port, self.g, m.ACTOR_ERROR, (None, *text))

    def _on_fatal(self, exc: BaseException, name: str, port: Any) -> None:
        self.fail(exc, name)
        if port is not None:
            msg = f"{self._label(name)} failed the actor: {type(exc).__name__}: {exc}"
            self.rt.send_reply(port, self.g, m.SUPERVISION, (msg, self.failure))

    # -- failure and supervision -------------------------------------------------------------
    def fail(self, exc: BaseException | None, endpoint: str | None, cause: str = "",
             chain: list[str] | None = None) -> None:
        """Mark this actor failed and report it to its owner."""
        if self.failure is not None:
            return
        tb = ""
        if exc is not None:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            cause = cause or f"{type(exc).__name__}: {exc}"
        self.failure = MeshFailure(
            mesh_name=self.uid, ranks=[self.local], coords=[dict(self.rank)],
            actor_class=self.class_name, endpoint=endpoint, host=self.rt.hostname,
            pid=self.rt.pid, cause=cause, traceback=tb, chain=list(chain or []),
            kind="exception",
        )
        self.failed_exc = exc
        self.rt.send_sys(self.owner, m.ActorFailed(self.uid, self.g, self.failure,
                                                   self.owner_uid))

    def supervise(self, failure: MeshFailure, done: Any) -> Any:
        """Offer a failure of an owned mesh to ``__supervise__`` (run in the mailbox).

        ``done(handled, error)`` reports the outcome to the supervisor.
        """
        fn = getattr(self.actor, "__supervise__", None)
        if fn is None:
            done(False, None)
            return None
        if self.is_async:
            return self._supervise_async(fn, failure, done)
        token = _current.set(self.hook_context)
        try:
            handled = fn(failure)
        except Exception as exc:
            done(False, exc)
            return None
        finally:
            _current.reset(token)
        done(bool(handled), None)
        return None

    async def _supervise_async(self, fn: Any, failure: MeshFailure, done: Any) -> None:
        token = _current.set(self.hook_context)
        try:
            handled = fn(failure)
            if inspect.isawaitable(handled):
                handled = await handled
        except Exception as exc:
            done(False, exc)
            return
        finally:
            _current.reset(token)
        done(bool(handled), None)

    def fail_with(self, failure: MeshFailure) -> Any:
        """The supervisor decided this actor fails (it did not handle an owned failure)."""
        if self.failure is not None:
            return None
        self.failure = failure = replace(
            failure, mesh_name=self.uid, ranks=[self.local], coords=[dict(self.rank)],
            actor_class=self.class_name, host=self.rt.hostname, pid=self.rt.pid)
        exc = SupervisionError(failure.cause, failure)
        self.failed_exc = exc
        self.rt.send_sys(self.owner, m.ActorFailed(self.uid, self.g, failure, self.owner_uid))
        return self.cleanup(exc)

    def abort(self, reason: str | None) -> None:
        """``Instance.abort``: fail this actor on purpose (with Monarch's words)."""
        why = reason if reason is not None else "no reason given"
        self.aborting = f"actor explicitly aborted due to: {why}"
        try:
            in_message = isinstance(_current.get(), MessageContext)
        except LookupError:
            in_message = False
        if not in_message:  # else after the message: its caller gets its answer, as in Monarch
            self._apply_abort()

    def _apply_abort(self) -> None:
        if self.aborting is not None:
            self.fail(None, None, cause=self.aborting)

    # -- stopping ----------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Self-stop (``context().actor_instance.stop()``): messages after this one are refused."""
        self.stop_requested = reason
        self.rt.send_sys(self.rt.address, m.StopActor(self.uid, reason, None))

    def release(self) -> None:
        """Drop the user's object once stopped, so that its finalizer (``__del__``) runs."""
        self.actor = None
        self._targets.clear()  # its bound methods hold it too
        self._own = {}

    def cleanup(self, exc: BaseException | None) -> Any:
        """Run ``__cleanup__`` once (returns a coroutine for async actors).

        ``exc`` is None on a graceful stop and the original exception on an error stop.
        """
        if self.is_async:
            return self._cleanup_async(exc)
        if self.cleaned:
            return None
        self.cleaned = True
        fn = getattr(self.actor, "__cleanup__", None)
        if fn is not None:
            token = _current.set(self.hook_context)
            try:
                fn(exc)
            except Exception:
                traceback.print_exc()
            finally:
                _current.reset(token)
        return None

    async def _cleanup_async(self, exc: BaseException | None) -> None:
        if self.cleaned:
            return
        self.cleaned = True
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        fn = getattr(self.actor, "__cleanup__", None)
        if fn is not None:
            token = _current.set(self.hook_context)
            try:
                result = fn(exc)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                traceback.print_exc()
            finally:
                _current.reset(token)


class _NullPort:
    """The port of an explicit-port endpoint reached by ``broadcast``: sends go nowhere."""

    def send(self, obj: Any) -> None:
        """Drop the value."""

    def exception(self, exc: BaseException) -> None:
        """Drop the error."""


#: Cancelled calls an actor remembers until their turn comes (the oldest forgotten first: a
#: cancel that crossed its call's reply leaves a port that never comes).
_CANCELS_KEPT = 65536


def _cancels(task: asyncio.Task[Any] | None) -> int:
    """How many cancellations of ``task`` are pending (Python 3.11+); 3.10 keeps no count:
    taken as one, which is the caller's when its context is cancelled."""
    cancelling = getattr(task, "cancelling", None)
    return 1 if cancelling is None else int(cancelling())


def _uncancel(task: asyncio.Task[Any]) -> None:
    """Take back the cancellation request of a handler its caller cancelled: the task (an
    async actor's, which handles the next message) is not being cancelled (Python 3.11+;
    3.10 keeps no count)."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()
