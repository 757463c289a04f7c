"""No message-size ceiling: an argument over 2 GiB (one sendmsg's limit) arrives whole."""

from __future__ import annotations

import numpy as np
import psutil
import pytest

from regency.actor import Actor, endpoint, this_host

pytestmark = pytest.mark.timeout(180)


class Sizer(Actor):
    @endpoint
    def describe(self, x: np.ndarray) -> tuple[int, int, int]:
        return int(x.nbytes), int(x[0]), int(x[-1])


@pytest.mark.skipif(psutil.virtual_memory().available < 8 << 30,
                    reason="needs about 6 GiB of free memory")
def test_an_argument_over_2_gib_arrives_whole() -> None:
    procs = this_host().spawn_procs(per_host={"p": 1})
    try:
        mesh = procs.spawn("sizer", Sizer)
        size = (2 << 30) + 12345
        a = np.zeros(size, dtype=np.uint8)
        a[0], a[-1] = 3, 9
        assert mesh.describe.call_one(a).get(timeout=150) == (size, 3, 9)
    finally:
        procs.stop().get(timeout=60)
