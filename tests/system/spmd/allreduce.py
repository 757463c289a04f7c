"""An unmodified torchrun-style script: a gloo all-reduce of each rank's (rank + 1).

    torchrun --nproc-per-node 2 allreduce.py OUT_DIR
"""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
         "MASTER_PORT"]
out = {"sum": t.item(), "env": {n: os.environ[n] for n in names}}
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
print(f"rank {rank}: all_reduce -> {t.item()}", flush=True)
dist.destroy_process_group()
