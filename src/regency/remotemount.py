"""``remotemount``: a local directory, read-only, on every host of a mesh (through FUSE).

Needs ``pip install 'regency[mount]'`` (the ``mfusepy`` binding), ``/dev/fuse`` and
``fusermount3`` on the hosts. See ``docs/jobs.md`` (Mounts).
"""

from __future__ import annotations

from ._mount._remote import MountHandler, fuse_available, remotemount

__all__ = ["MountHandler", "fuse_available", "remotemount"]
