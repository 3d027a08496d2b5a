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

MAX_JOB_NAME = 160
"""Characters of a job directory's readable part (file names allow 255 bytes)."""


def job_dir_name(override_dirname: str) -> str:
    """A file-system-safe, stable directory name that shows every swept value.

    Each ``key=value`` override keeps its value and the last part of its key
    (``algorithm.lr=3e-4`` -> ``lr=3e-4``), so a seed or a tuned learning rate stays
    readable; the digest of the full overrides keeps names unique when the readable
    part is cut or two keys share a last part.
    """
    if not override_dirname:
        return "default"
    digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:8]
    items = []
    for item in override_dirname.split(","):
        key, sep, value = item.partition("=")
        items.append(f"{key.lstrip('+~').rsplit('.', 1)[-1]}{sep}{value}" if sep else item)
    readable = re.sub(r"[^A-Za-z0-9_.=,-]+", "_", ",".join(items))[:MAX_JOB_NAME].strip("_")
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
