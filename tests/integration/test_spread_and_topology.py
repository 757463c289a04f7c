"""``proc_bind="spread"`` gives each proc of a host its share of the CPUs there, and
``this_host().topology()`` describes this machine as the kernel does."""

from __future__ import annotations

import os

import pytest

from regency._runtime._topology import allowed
from regency.actor import Actor, endpoint, this_host

T = 30


class Where(Actor):
    @endpoint
    def cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("count", [1, 2, 3])
def test_spread_shares_this_hosts_cpus_between_its_procs(count: int) -> None:
    cpus = sorted(allowed())
    procs = this_host().spawn_procs(per_host={"procs": count}, proc_bind="spread")
    try:
        shares = list(procs.spawn("where", Where).cpus.call().get(timeout=T).values())
    finally:
        procs.stop().get(timeout=T)
    if count <= len(cpus):
        assert sorted(c for share in shares for c in share) == cpus  # all, once each
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
    else:  # more procs than CPUs: one CPU each, round the ring
        assert shares == [[cpus[i % len(cpus)]] for i in range(count)]


def test_spread_is_checked_where_it_is_given() -> None:
    with pytest.raises(ValueError, match="give 'spread' or a list of dicts"):
        this_host().spawn_procs(per_host={"procs": 2}, proc_bind="spred")


def test_this_hosts_topology_is_what_the_kernel_says() -> None:
    topo = this_host().topology()
    assert len(topo) == 1
    host = topo[0]
    assert host.cpus == sorted(allowed())
    assert sorted(c for cpus in host.numa.values() for c in cpus) == host.cpus
    assert host.rank == 0 and host.coords == {}
    assert str(topo).splitlines()[0].split() == ["host", "hostname", "agent", "cpus", "numa",
                                                 "gpus", "labels"]
