"""Hydra glue: override checks, composition, sweeps, the ledger and SLURM specifics.

Nothing below this package imports Hydra. Importing it registers the
``agilerl_job_dir`` resolver used by ``hydra.sweep.subdir`` and ``agilerl_run_name``
(``hydra.run.dir``).
"""

from __future__ import annotations

import hashlib
import re

from omegaconf import OmegaConf


def job_dir_name(override_dirname: str) -> str:
    """A short, file-system-safe, stable directory name for a job's overrides."""
    if not override_dirname:
        return "default"
    digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.=,-]+", "_", override_dirname)[:60].strip("_")
    return f"{readable}-{digest}"


OmegaConf.register_new_resolver("agilerl_job_dir", job_dir_name, replace=True)


def _run_name(manifest: object, algorithm: object, env: object) -> str:
    from agilerl.launch.run_names import hydra_run_name

    return hydra_run_name(manifest, algorithm, env)


OmegaConf.register_new_resolver("agilerl_run_name", _run_name, replace=True)
