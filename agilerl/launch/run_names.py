"""Run-directory names: after the manifest that runs, and unique per process.

``runs/<date>/<time>_<algorithm>_<env>_<token>``: the algorithm and env come
from the manifest file when ``manifest=`` is given (not from the config
groups' defaults), and the random token keeps runs started in the same second
apart. Registered as the ``agilerl_run_name`` resolver used by
``hydra.run.dir``.
"""

from __future__ import annotations

import functools
import re
import secrets
from typing import Any

_TOKEN = secrets.token_hex(3)


def _slug(text: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", str(text)).strip("_").lower() or "run"


def run_name(algorithm: str, env: str) -> str:
    """``<algorithm>_<env>_<token>``, the token fixed for this process."""
    return f"{_slug(algorithm)}_{_slug(env)}_{_TOKEN}"


@functools.lru_cache(maxsize=32)
def hydra_run_name(
    manifest: Any, algorithm: Any, env: Any, env_name: Any = None, entrypoint: Any = None
) -> str:
    """The run name for Hydra's run dir: from the manifest file if given, else the choices.

    Your own env (``env=custom``, or an ``environment.entrypoint``) is named by its
    ``environment.name``, not by the env group it was composed from.
    """
    if (env == "custom" or entrypoint not in (None, "", "None")) and env_name not in (
        None,
        "",
        "None",
    ):
        env = env_name
    if manifest not in (None, "", "None"):
        try:
            from agilerl.arena.models.loading import read_manifest_file

            data = read_manifest_file(str(manifest))
            algorithm = (data.get("algorithm") or {}).get("name", algorithm)
            environment = data.get("environment") or {}
            env = environment.get("name") or environment.get("dataset") or env
        except Exception:  # the run validates the file and reports what is wrong
            pass
    return run_name(str(algorithm), str(env))
