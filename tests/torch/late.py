"""A torchrun training loop whose rank LATE_RANK is slow every step: before each step's all_reduce
(the gradients' bucket, as DDP would reduce it) it sleeps LATE_MS ms, as a slow data loader or
host would. The others call the all_reduce on time and wait in it. Kernels do not run on the
simulated node: the step's tensor comes from the host and the result is read back (the step's sync).
Prints one line a rank; exits 1 on a wrong result.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import worker

STEPS = int(os.environ.get("LATE_STEPS", "30"))
N = 1 << 16  # float32 elements of the bucket: 256 KiB


def main():
    rank, world, local, dev = worker.start()
    late = rank == int(os.environ.get("LATE_RANK", "-1"))
    delay = float(os.environ.get("LATE_MS", "0")) / 1000
    ok = True
    for step in range(STEPS):
        grad = torch.full((N,), float(rank + step)).to(dev)  # the step's "backward"
        if late:
            time.sleep(delay)
        dist.all_reduce(grad)
        ok = ok and torch.equal(grad.cpu(), torch.full((N,), float(sum(range(world)) + world * step)))
    dist.destroy_process_group()
    os.write(1, f"rank {rank}/{world}: {STEPS} steps {'ok' if ok else 'WRONG'}\n".encode())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
