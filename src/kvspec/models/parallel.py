"""Data-parallel processes on one node: one per GPU (NCCL), or CPU processes over gloo (how the
tests exercise the multi-GPU paths here). Each process runs the same function; torch.distributed
is initialised before it starts, so the function (or accelerate inside it) finds its rank."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any


def launch(fn: Callable[..., Any], processes: int, *args: Any) -> None:
    """Run `fn(*args)` in `processes` spawned processes of one process group (a module-level
    function and picklable arguments); a failing process fails the launch."""
    import torch.multiprocessing as mp

    port = _free_port()
    mp.start_processes(_worker, args=(processes, port, fn, args), nprocs=processes,
                       start_method="spawn")  # fmt: skip


def _worker(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world))  # fmt: skip
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        fn(*args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
