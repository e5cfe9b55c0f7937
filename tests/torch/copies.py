"""Copies between GPUs as PyTorch programs make them, each checked byte for byte on the host.

Usage: copies.py A:B [A:B ...]   (CUDA ordinals as this process sees them)

For each pair: one host-to-device copy to A, `.to('cuda:B')` and `copy_` from A to B, a
`non_blocking` copy back from B to A, and a `non_blocking` copy from pinned host memory to B. So the
trace must show, per pair, 2 copies (8 MiB) A->B and 1 copy (4 MiB) B->A. Kernels do not run on
the simulated node: every tensor's data comes from the host.
"""
import sys

import torch

N = 1 << 20  # int32 elements: 4 MiB a tensor


def pattern(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-(2**31), 2**31 - 1, (N,), dtype=torch.int32, generator=g)


def main(pairs):
    for i, spec in enumerate(pairs):
        a, b = (int(x) for x in spec.split(":"))
        host = pattern(i)
        x = host.to(f"cuda:{a}")
        y = x.to(f"cuda:{b}")
        z = torch.empty(N, dtype=torch.int32, device=f"cuda:{b}")
        z.copy_(x)
        w = torch.empty(N, dtype=torch.int32, device=f"cuda:{a}")
        w.copy_(z, non_blocking=True)
        v = torch.empty(N, dtype=torch.int32, device=f"cuda:{b}")
        v.copy_(host.pin_memory(), non_blocking=True)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        same = [torch.equal(t.cpu(), host) for t in (x, y, z, w, v)]
        print(f"cuda:{a} -> cuda:{b}: {N * 4} bytes a copy, equal {same}", flush=True)
        if not all(same):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
