"""Envelope kinds and layouts: the first buffer of every frame is a pickled tuple.

``CALL``  ``(CALL, mesh_uid, endpoint, port, cast, sender)``
          frame[1] is the pickled ``(args, kwargs)``; frame[2:] are its out-of-band buffers.
          ``port`` is ``(addr, port_id)`` or None; ``cast`` is the Shape the message was sent
          to, so the receiver computes its message rank without per-member headers: one
          envelope, pickled once, goes to every member of a cast.
``REPLY`` ``(REPLY, port_id, rank, status)``; frame[1:] is the pickled value.
``SYS``   ``(SYS, kind)``; frame[1:] is a pickled dict of arguments for runtime handlers.
"""

from __future__ import annotations

CALL = 0
REPLY = 1
SYS = 2

# REPLY status
OK = 0
ACTOR_ERROR = 1  # value: (exception | None, type name, text, traceback text, endpoint label)
RAW_ERROR = 2  # value: an exception sent with port.exception(); raised as is
SUPERVISION = 3  # value: (message, MeshFailure | None)
EOS = 4  # no more values on this port (a member stopped before answering)
