"""No message-size ceiling: an argument over 2 GiB (one sendmsg's limit) arrives whole,
and the host holds it once more, not twice more."""

from __future__ import annotations

import numpy as np
import psutil
import pytest

from regency.actor import Actor, endpoint, this_host

pytestmark = pytest.mark.timeout(180)


class Sizer(Actor):
    @endpoint
    def describe(self, x: np.ndarray) -> tuple[int, int, int, int]:
        # measured while the argument is alive in this proc
        return int(x.nbytes), int(x[0]), int(x[-1]), psutil.virtual_memory().available


@pytest.mark.skipif(psutil.virtual_memory().available < 8 << 30,
                    reason="needs about 6 GiB of free memory")
def test_an_argument_over_2_gib_arrives_whole_without_extra_copies() -> None:
    procs = this_host().spawn_procs(per_host={"p": 1})
    try:
        mesh = procs.spawn("sizer", Sizer)
        mesh.initialized.get(timeout=60)
        size = (2 << 30) + 12345
        a = np.ones(size, dtype=np.uint8)  # every page touched: the sender's own copy
        a[0], a[-1] = 3, 9
        before = psutil.virtual_memory().available
        nbytes, first, last, during = mesh.describe.call_one(a).get(timeout=150)
        assert (nbytes, first, last) == (size, 3, 9)
        # One copy of the payload for the receiver (shared memory it maps), no more: no
        # pickle of it, no second buffer. The measure is the whole machine's, so whatever
        # else runs there moves it (a stress run beside another test run saw 1.25x): the
        # bound sits halfway between one copy (1x) and two (2x).
        used = before - during
        print(f"memory used by the transfer: {used / size:.2f}x the payload")
        assert used < 1.5 * size, f"the transfer took {used / size:.2f}x the payload"
    finally:
        procs.stop().get(timeout=60)
