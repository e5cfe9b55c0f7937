"""A torchrun job that captures NCCL collectives into a CUDA graph and replays it, as vLLM and
torch.compile(mode="reduce-overhead") do. Inputs come from the host (kernels do not run on the
simulated node; its NCCL computes the results, a captured collective's at each replay).

Per rank: one all_reduce outside any graph, then torch.cuda.graph capturing an all_reduce and a
broadcast (from rank 0) on a side stream, replayed GRAPH_REPLAYS times. Prints one line a rank;
exits 1 on a wrong result.
"""
import os
import sys

import torch
import torch.distributed as dist

import worker

N = 1 << 16  # float32 elements: 256 KiB
REPLAYS = int(os.environ.get("GRAPH_REPLAYS", "5"))


def main():
    rank, world, local, dev = worker.start()

    x = torch.full((N,), float(rank + 1)).to(dev)
    dist.all_reduce(x)  # eager: also warms NCCL up before the capture, as graph users must
    total = world * (world + 1) // 2
    b = torch.full((N,), float(rank + 10)).to(dev)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=torch.cuda.Stream()):
        dist.all_reduce(x)
        dist.broadcast(b, src=0)
    for _ in range(REPLAYS):
        g.replay()
    torch.cuda.synchronize()
    # Each replay sums x over the ranks (all equal): total * world ** REPLAYS; b is rank 0's.
    ok = torch.equal(x.cpu(), torch.full((N,), float(total * world ** REPLAYS))) and \
        torch.equal(b.cpu(), torch.full((N,), 10.0))
    # One write: the ranks share stdout, and print() may write the line and its newline apart.
    line = f"rank {rank}/{world} on cuda:{local} graph replays {REPLAYS} x {x[0].item():g} {'ok' if ok else 'WRONG'}\n"
    os.write(1, line.encode())
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
