"""Which process of a multi-process run this is, and what only the first one does.

``torchrun --nproc_per_node=N train.py ...`` (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``) or ``srun`` with several tasks (``SLURM_PROCID``,
``SLURM_STEP_NUM_TASKS``, ``SLURM_LOCALID``) starts the same run N times.
Rank 0 resolves the run directory, claims its lock and writes every run file
(manifest, metrics, checkpoints, summary, loggers); the others receive its
decisions through the process group (:func:`from_main`) and write nothing.
Every process seeds alike, so all build the same model.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agilerl.arena.models.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class ProcessInfo:
    """This process's place in the run.

    Attributes:
        rank: Global rank (0 writes the run directory).
        world_size: Processes in the run.
        local_rank: Rank on this machine (picks the CUDA device).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Whether this process writes the run directory."""
        return self.rank == 0

    @property
    def multi(self) -> bool:
        """Whether more than one process trains."""
        return self.world_size > 1


def process_info(environ: Mapping[str, str] | None = None) -> ProcessInfo:
    """Rank, world size and local rank from torchrun's or SLURM's variables (else one process)."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" in env:
        return ProcessInfo(
            int(env.get("RANK", "0")), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
        )
    if "SLURM_STEP_NUM_TASKS" in env and "SLURM_PROCID" in env:  # one srun step, N tasks
        return ProcessInfo(
            int(env["SLURM_PROCID"]),
            int(env["SLURM_STEP_NUM_TASKS"]),
            int(env.get("SLURM_LOCALID", "0")),
        )
    return ProcessInfo()


def _group_active() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def local_device(device: str) -> str:
    """``device`` here: ``cuda`` becomes ``cuda:<local rank>`` with several processes."""
    info = process_info()
    if info.multi and device == "cuda":
        return f"cuda:{info.local_rank}"
    return device


def check_supported(paradigm: str, supported: bool) -> None:
    """Refuse a multi-process run of a paradigm that trains in one process only.

    Raises:
        ConfigError: Under ``WORLD_SIZE`` > 1 when ``supported`` is false.
    """
    info = process_info()
    if info.multi and not supported:
        raise ConfigError(
            f"{paradigm} training runs in one process, but this run was started as "
            f"{info.world_size} processes (torchrun --nproc_per_node or srun --ntasks); "
            "start it as one process (python train.py ...), or use an LLM rollout algorithm "
            "(grpo, llm_ppo, llm_reinforce) for data-parallel training"
        )


def join(device: str = "cpu") -> ProcessInfo:
    """Join the run's process group (NCCL on CUDA, else gloo); nothing for one process.

    Under SLURM without torchrun, ``MASTER_ADDR`` defaults to this host on a
    one-node step and ``MASTER_PORT`` to a port derived from the job id.

    Raises:
        ConfigError: On a multi-node SLURM step without ``MASTER_ADDR``.
    """
    info = process_info()
    if not info.multi:
        return info
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return info
    os.environ.setdefault("RANK", str(info.rank))
    os.environ.setdefault("WORLD_SIZE", str(info.world_size))
    os.environ.setdefault("LOCAL_RANK", str(info.local_rank))
    if "MASTER_ADDR" not in os.environ:
        if int(os.environ.get("SLURM_STEP_NUM_NODES", os.environ.get("SLURM_NNODES", "1"))) > 1:
            raise ConfigError(
                "a multi-node SLURM run needs MASTER_ADDR (and MASTER_PORT) set to the first "
                "node, or start it with torchrun"
            )
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    job = int(os.environ.get("SLURM_JOB_ID", "0"))
    os.environ.setdefault("MASTER_PORT", str(20000 + job % 20000))
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(info.local_rank)
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    atexit.register(leave)
    return info


LEAVE_WAIT_SECONDS = 10.0
"""Longest a process waits at exit for its peers before it destroys the group anyway."""


def leave() -> None:
    """Destroy the process group, if any (registered at exit by :func:`join`).

    A process that exits with a gloo group still alive can abort during
    interpreter shutdown (gloo's worker threads outlive Python), so the group
    is destroyed while the interpreter is whole. With gloo the processes first
    meet at a barrier of at most :data:`LEAVE_WAIT_SECONDS`: one that destroyed its
    half of a connection while a peer's gloo thread still used it aborted that peer
    (``terminate called without an active exception``, seen under load). A process
    leaving after an error waits at most that long for peers that will never arrive.
    """
    import contextlib
    import datetime

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if dist.get_backend() == "gloo" and dist.get_world_size() > 1:
        with contextlib.suppress(Exception):  # a peer is gone or late: leave anyway
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=LEAVE_WAIT_SECONDS))
    dist.destroy_process_group()


def broadcast(value: T) -> T:
    """Rank 0's ``value`` on every process (picklable; itself without a process group)."""
    if not _group_active():
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def from_main(decide: Callable[[], T]) -> T:
    """Run ``decide`` on rank 0 only and give every process its result.

    A :class:`ConfigError` on rank 0 is raised on every process (so none waits
    for a decision that never comes).
    """
    if not _group_active():
        return decide()
    outcome: tuple[bool, Any] = (True, None)
    if process_info().is_main:
        try:
            outcome = (True, decide())
        except ConfigError as error:
            outcome = (False, error.render())
    ok, value = broadcast(outcome)
    if not ok:
        raise ConfigError(value)
    return value


def barrier() -> None:
    """Wait for every process (nothing without a process group)."""
    if _group_active():
        import torch.distributed as dist

        dist.barrier()


@contextlib.contextmanager
def claim(path: str | Path) -> Iterator[Path]:
    """Hold the run directory's lock on rank 0; the others wait until it is held.

    Raises:
        ConfigError: On every process, when rank 0 cannot claim the directory.
    """
    from agilerl.training.run_lock import claim_run_dir

    with contextlib.ExitStack() as stack:

        def hold() -> None:
            stack.enter_context(claim_run_dir(path))

        from_main(hold)
        yield Path(path)
