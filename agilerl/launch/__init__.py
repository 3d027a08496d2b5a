"""Hydra glue: override checks, composition, sweeps, the ledger and SLURM specifics.

Nothing below this package imports Hydra. :func:`register_resolvers` registers the
``agilerl_job_dir`` resolver used by ``hydra.sweep.subdir`` and ``agilerl_run_name``
(``hydra.run.dir``). Importing this package registers them when OmegaConf is already
loaded (any Hydra app); the modules that compose configs (``entry``, ``compose``)
register them on import. ``agilerl validate`` reaches :mod:`agilerl.launch.preflight`
through this package without loading OmegaConf at all.
"""

from __future__ import annotations

import hashlib
import re
import sys


def job_dir_name(override_dirname: str) -> str:
    """A short, file-system-safe, stable directory name for a job's overrides."""
    if not override_dirname:
        return "default"
    digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.=,-]+", "_", override_dirname)[:60].strip("_")
    return f"{readable}-{digest}"


def _run_name(
    manifest: object,
    algorithm: object,
    env: object,
    env_name: object = None,
    entrypoint: object = None,
) -> str:
    from agilerl.launch.run_names import hydra_run_name

    return hydra_run_name(manifest, algorithm, env, env_name, entrypoint)


def _smoke(field: str, algorithm: object) -> object:
    from agilerl.launch.smoke import smoke_value

    return smoke_value(field, str(algorithm))


def register_resolvers() -> None:
    """Register the ``agilerl_*`` resolvers with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("agilerl_job_dir", job_dir_name, replace=True)
    OmegaConf.register_new_resolver("agilerl_run_name", _run_name, replace=True)
    OmegaConf.register_new_resolver("agilerl_smoke", _smoke, replace=True)


if "omegaconf" in sys.modules:
    register_resolvers()
