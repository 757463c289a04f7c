"""What a call costs the garbage collector: few objects in flight, and a frozen start heap.

A burst of pipelined calls keeps every call's objects alive until its ``get()``; each object
is walked by every GC pass that runs meanwhile, so a call in flight is one ``Future``, its
``Completion`` and one collector (its reply port, description and reader at once). The
objects that a controller and a proc start with are frozen out of the full passes
(``regency._runtime._heap``), unless ``gc_freeze`` is off.
"""

from __future__ import annotations

import collections
import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from _actors import HeapProbe
from regency import config
from regency.actor import this_host

pytestmark = pytest.mark.timeout(120)
T = 30
CALLS = 300


@pytest.fixture(scope="module")
def probe() -> Iterator[Any]:
    procs = this_host().spawn_procs(per_host={"p": 1}, name="footprint")
    try:
        yield procs.spawn("heap", HeapProbe)
    finally:
        procs.stop().get(timeout=T)


def _tracked() -> collections.Counter[str]:
    # by module too: an asyncio ``Future`` some other part of the process makes meanwhile
    # (a stopping mesh of an earlier test, say) is not one of the calls'
    return collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}"
                               for o in gc.get_objects())


def test_a_call_in_flight_keeps_three_objects(probe: Any) -> None:
    probe.frozen.call_one().get(timeout=T)
    gc.collect()
    gc.disable()  # a pass in between would only move objects, but keep the count exact
    try:
        before = _tracked()
        futures = [probe.frozen.call_one() for _ in range(CALLS)]
        grown = _tracked() - before
        for f in futures:
            f.get(timeout=T)
    finally:
        gc.enable()
    # what else grew is the replies being read meanwhile (their buffers), not the calls; a
    # call already answered may have let its collector go
    per_call = {kind: n / CALLS for kind, n in grown.items() if n >= CALLS // 2}
    assert per_call.keys() <= {"regency._api._future.Future",
                               "regency._runtime._completion.Completion",
                               "regency._api._endpoint._One"}, grown.most_common(8)
    assert max(per_call.values()) <= 1.0, grown.most_common(8)


def test_procs_start_with_their_imports_frozen(probe: Any) -> None:
    assert probe.frozen.call_one().get(timeout=T) > 1000


def test_the_controller_freezes_its_start_heap_once() -> None:
    if not config.get("gc_freeze"):
        pytest.skip("gc_freeze is off in this environment (REGENCY_GC_FREEZE)")
    this_host()  # the runtime is started
    assert gc.get_freeze_count() > 1000


SCRIPT = """
import gc
from regency.actor import this_host
procs = this_host().spawn_procs(per_host={"p": 1})
print("frozen", gc.get_freeze_count(), flush=True)
procs.stop().get(timeout=30)
"""


@pytest.mark.parametrize(("value", "frozen"), [("0", False), ("1", True)])
def test_gc_freeze_off_leaves_the_controller_s_collector_alone(value: str, frozen: bool) -> None:
    env = {**os.environ, "REGENCY_GC_FREEZE": value}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=T * 2, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    count = int(done.stdout.split("frozen", 1)[1].split()[0])
    assert (count > 1000) is frozen, done.stdout
