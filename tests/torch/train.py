"""A torchrun job with backend nccl, checked on the host: every collective PyTorch users call.

Run by `python -m torch.distributed.run --nproc-per-node W train.py`; TRAIN_INIT=eager passes
`device_id` to init_process_group (NCCL communicators made at once), otherwise lazy (at the first
collective). TRAIN_RAISE_RANK=R: rank R raises after the broadcast (a training step that fails on one
rank: torchrun then stops the others, which wait in the all_gather it never calls). Kernels do not run on the simulated node: every input comes from the host, and the
simulated NCCL computes the results. Prints one line a rank; exits 1 on a wrong result.
"""
import os
import sys

import torch
import torch.distributed as dist

import worker

N = 1 << 18          # float32 elements of the collectives' tensors: 1 MiB
CHUNK = 1 << 12      # all_to_all_single: elements to each peer (16 KiB)
RING = 1 << 14       # batch_isend_irecv: elements to the next rank (64 KiB)


def host(value, n=N):
    return torch.full((n,), float(value))


def main():
    eager = os.environ.get("TRAIN_INIT") == "eager"
    rank, world, local, dev = worker.start(eager)
    ok = {}

    x = host(rank + 1).to(dev)
    dist.all_reduce(x)
    ok["all_reduce"] = torch.equal(x.cpu(), host(world * (world + 1) // 2))

    b = host(rank + 10).to(dev)
    dist.broadcast(b, src=1)
    ok["broadcast"] = torch.equal(b.cpu(), host(11))
    if os.environ.get("TRAIN_RAISE_RANK") == str(rank):
        raise RuntimeError(f"rank {rank}: a training step failed (TRAIN_RAISE_RANK)")

    out = torch.empty(world * N, device=dev)
    dist.all_gather_into_tensor(out, host(rank).to(dev))
    ok["all_gather_into_tensor"] = torch.equal(out.cpu(), torch.arange(world).float().repeat_interleave(N))

    rs = torch.empty(N, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(world * N).float().to(dev))
    ok["reduce_scatter_tensor"] = torch.equal(rs.cpu(), world * torch.arange(rank * N, (rank + 1) * N).float())

    a2a = (torch.arange(world * CHUNK).float() + 1000 * rank).to(dev)
    a2a_out = torch.empty_like(a2a)
    dist.all_to_all_single(a2a_out, a2a)
    want = torch.cat([torch.arange(rank * CHUNK, (rank + 1) * CHUNK).float() + 1000 * src for src in range(world)])
    ok["all_to_all_single"] = torch.equal(a2a_out.cpu(), want)

    send = host(rank, RING).to(dev)
    recv = torch.empty(RING, device=dev)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    ok["batch_isend_irecv"] = torch.equal(recv.cpu(), host((rank - 1) % world, RING))

    pair = dist.new_group([0, 1])
    if rank < 2:
        y = host(rank + 1).to(dev)
        dist.all_reduce(y, group=pair)
        ok["new_group"] = torch.equal(y.cpu(), host(3))

    dist.barrier()
    dist.destroy_process_group()
    line = (f"rank {rank}/{world} on cuda:{local} ({'eager' if eager else 'lazy'} init): "
            + ", ".join(f"{k} {'ok' if v else 'WRONG'}" for k, v in ok.items()) + "\n")
    os.write(1, line.encode())  # one write: the workers share torchrun's stdout
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
