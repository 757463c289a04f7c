"""``gather_mount``: every host's directory shown here, read-only, one subdirectory per host.

Needs ``pip install 'regency[mount]'`` (``mfusepy``), ``/dev/fuse`` and ``fusermount3`` on
this machine. See ``docs/jobs.md`` (Mounts).
"""

from __future__ import annotations

from ._mount._gather import GatherMount, gather_mount

__all__ = ["GatherMount", "gather_mount"]
