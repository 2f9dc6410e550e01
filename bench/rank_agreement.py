"""What memtui's per-step agreement between ranks costs: one small all-reduce on gloo.

At every optimizer-step boundary the ranks all-reduce (MAX) a few int64 (stop flag and
directive count; the memory readings the controller steers by), see
engine/trainer/ranks/rank_link.py and adaptive_memory.py. This times ``RankGroup.max_ints`` on
2 processes over gloo on this host, as the trainer runs it, and prints the median and p90.

    python bench/rank_agreement.py [--calls 2000] [--world 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from engine.trainer.ranks.process_group import free_port
from engine.trainer.ranks.rank_group import RankGroup


def worker(rank: int, world: int, port: int, calls: int) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    group = RankGroup(rank, world)
    for _ in range(100):  # warm-up
        group.max_ints([0, 0])
    times = []
    for i in range(calls):
        started = time.perf_counter()
        group.max_ints([i % 2, rank])
        times.append(time.perf_counter() - started)
    if rank == 0:
        times.sort()
        median, p90 = statistics.median(times), times[int(0.9 * len(times))]
        print(f"max_ints over {world} ranks (gloo): median {median * 1e6:.0f} us, p90 {p90 * 1e6:.0f} us")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--world", type=int, default=2)
    args = parser.parse_args()
    mp.spawn(worker, args=(args.world, free_port(), args.calls), nprocs=args.world)


if __name__ == "__main__":
    main()
