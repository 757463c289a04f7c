"""Code sync: ``Workspace`` for ``await host_mesh.sync_workspace(Workspace(dirs=[...]))``.

See ``docs/jobs.md`` (Code sync) and ``regency._api._sync`` for how it works.
"""

from __future__ import annotations

from ._api._sync import Workspace

__all__ = ["Workspace"]
