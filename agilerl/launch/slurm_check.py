"""What the SLURM cluster offers, checked before submitting, and sbatch refusals as user errors."""

from __future__ import annotations

import shutil
import subprocess

from agilerl.arena.models.errors import ConfigError


def partitions() -> list[str] | None:
    """The cluster's partitions (the default one marked ``*``), or ``None`` without ``sinfo``."""
    if shutil.which("sinfo") is None:
        return None
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=15, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return sorted({line.strip() for line in out.splitlines() if line.strip()})


def _listing(names: list[str]) -> str:
    return ", ".join(f"{n.rstrip('*')} (default)" if n.endswith("*") else n for n in names)


def check_partition(partition: str | None) -> None:
    """Refuse a partition the cluster does not have (when ``sinfo`` can tell).

    Raises:
        ConfigError: Naming the partition and the ones that exist.
    """
    if not partition:
        return
    names = partitions()
    if names is None:
        return
    wanted = [p.strip() for p in str(partition).split(",")]
    known = {n.rstrip("*") for n in names}
    missing = [p for p in wanted if p not in known]
    if missing:
        raise ConfigError(
            f"hydra.launcher.partition: this cluster has no partition {', '.join(missing)}; "
            f"its partitions (sinfo): {_listing(names)}",
            "command line",
        )


def sbatch_refusal(exc: Exception, partition: str | None) -> ConfigError | None:
    """A user error for ``sbatch: error: ...`` (``None`` if ``exc`` is something else)."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if "sbatch: error" in line]
    if not lines:
        return None
    names = partitions()
    known = f"; partitions (sinfo): {_listing(names)}" if names else ""
    where = f" (hydra.launcher.partition={partition})" if partition else ""
    return ConfigError(
        f"hydra.launcher: sbatch refused the jobs{where}: {lines[-1]}{known}", "command line"
    )
