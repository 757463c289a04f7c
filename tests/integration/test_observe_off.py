"""With recording off (the default) nothing observes: no observer, no wrapped calls, no file."""

from __future__ import annotations

import os

from regency._api._process import runtime
from regency.actor import Actor, endpoint, this_proc


class _Plain(Actor):
    @endpoint
    def ping(self) -> int:
        return 1


def test_recording_off_leaves_the_call_path_alone() -> None:
    mesh = this_proc().spawn("plain_observe_off", _Plain)
    assert mesh.ping.call_one().get(timeout=20) == 1
    rt = runtime()
    assert rt.observer is None
    cells = [c for uid, c in rt.cells.items() if uid.startswith("plain_observe_off")]
    assert cells and all("handle" not in vars(c.behavior) for c in cells)
    assert not os.path.exists(os.path.join(".regency", "jobs", f"{rt.job}.db"))
    mesh.stop().get(timeout=20)
