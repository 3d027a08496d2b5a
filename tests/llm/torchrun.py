"""Launch a test worker as two processes with torchrun (gloo on CPU, one thread each)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A port nothing listens on now (tests running side by side each get their own)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_two_processes(worker: Path, *args: str, timeout: int = 300) -> None:
    """Run ``worker`` with ``args`` under ``torchrun --nproc_per_node=2`` from the repository.

    Raises:
        subprocess.CalledProcessError: If the run fails.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={free_port()}",
            str(worker),
            *args,
        ],
        check=True,
        env=env,
        cwd=REPO,
        timeout=timeout,
    )
