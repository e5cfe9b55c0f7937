"""What every torchrun worker of these tests does first: its rank, world size and local rank from
torchrun's environment, its GPU (cuda:LOCAL_RANK) made current, and the NCCL process group."""
import os

import torch
import torch.distributed as dist


def start(eager=True):
    """Returns (rank, world, local, device); eager=True passes device_id (communicators made at once)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev if eager else None)
    return rank, world, local, dev
