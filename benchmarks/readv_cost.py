"""What one more range costs in a READV request (``_dataplane._client.read_ranges``).

A data-plane server and a reader in one process, over loopback TCP and a Unix socket. For
ranges of 512 B to 16 KiB, 1,022 of them (one request, as ``reshard_into`` sends them) are
read every other range of a buffer, against one contiguous read of the same bytes; the
difference per range, in microseconds and in bytes of the contiguous read, is what
``_reshard_plan._RANGE_COST`` weighs a socket range as. Medians of ``--runs``::

    .venv/bin/python benchmarks/readv_cost.py --runs 15
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from regency._dataplane import _proto
from regency._dataplane._client import Pool, read_ranges, transfer
from regency._dataplane._handle import Descriptor
from regency._dataplane._identity import peer_info
from regency._dataplane._memory import buffer_region
from regency._dataplane._registry import Registry
from regency._dataplane._server import DataServer

SECRET = b"s" * 32
RANGES = 1022


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    server = DataServer(SECRET, Registry(), job="bench", tcp_host="127.0.0.1")
    data = np.ones(32 << 20, dtype=np.uint8)
    reg = server.registry.register(buffer_region(data))
    desc = Descriptor(reg_id=reg.reg_id, key=reg.key, size=reg.region.nbytes,
                      readonly=reg.region.readonly, address=reg.region.address,
                      slot_addr=reg.slot_addr, owner=peer_info(), control="unix:@none",
                      unix=server.unix, tcp=server.tcp)
    pool, view = Pool(), memoryview(bytearray(32 << 20))
    print("| transport | range | ranges ms | contiguous ms | us per range | bytes per range |")
    print("|---|---|---|---|---|---|")
    for name, addr in (("tcp", server.tcp), ("unix", server.unix)):
        assert addr is not None
        for size in (512, 4096, 8192, 16384):
            pieces = [(i * 2 * size, i * size, size) for i in range(RANGES)]
            total = RANGES * size
            ranged, whole = [], []
            for _ in range(args.runs):
                t = time.perf_counter()
                read_ranges(pool, addr, SECRET, desc, view, pieces, time.monotonic() + 10)
                ranged.append(time.perf_counter() - t)
                t = time.perf_counter()
                transfer(pool, addr, SECRET, desc, _proto.READ, view[:total], 0,
                         time.monotonic() + 10)
                whole.append(time.perf_counter() - t)
            a, b = statistics.median(ranged), statistics.median(whole)
            per = (a - b) / RANGES
            print(f"| {name} | {size} | {a * 1e3:.2f} | {b * 1e3:.2f} | {per * 1e6:.2f} | "
                  f"{per / (b / total):.0f} |")
    pool.close_all()
    server.close()


if __name__ == "__main__":
    main()
