"""Which optional extra installs which package, and the user error for a missing one."""

from __future__ import annotations

import importlib.util

from agilerl.arena.models.errors import ConfigError, Problem

# top-level import name -> the extra of ours (pyproject.toml) that installs it
PACKAGE_EXTRAS = {
    "pettingzoo": "multiagent",
    "mpe2": "multiagent",
    "sklearn": "bandits",
    "pandas": "bandits",
    "pyarrow": "bandits",
    "minari": "offline",
    "h5py": "offline",
    "PIL": "offline",
    "transformers": "llm",
    "peft": "llm",
    "accelerate": "llm",
    "datasets": "llm",
    "tokenizers": "llm",
    "gguf": "smollm",
    "bitsandbytes": "qlora",
    "vllm": "vllm",
    "wandb": "wandb",
    "submitit": "slurm",
    "optuna": "slurm",
    "hydra_plugins.hydra_submitit_launcher": "slurm",
    "imageio": "video",
    "imageio_ffmpeg": "video",
    "Box2D": "box2d",
    "onnx": "export",
    "onnxscript": "export",
    "onnxruntime": "export",
    "ale_py": "atari",
    "minatar": "atari",
    "cv2": "atari",
}


def install_hint(extra: str) -> str:
    """How to install one of our extras, from PyPI or from a checkout."""
    return f"pip install 'agilerl[{extra}]' (from a checkout: pip install -e \".[{extra}]\")"


def extra_of(module: str | None) -> str | None:
    """The extra installing ``module`` (a dotted import name); ``None`` when none of ours does."""
    if not module:
        return None
    for package, extra in PACKAGE_EXTRAS.items():
        if module == package or module.startswith(package + "."):
            return extra
    return PACKAGE_EXTRAS.get(module.split(".")[0])


def extra_problem(module: str | None, needed_by: str, path: str = "") -> Problem | None:
    """The problem "``needed_by`` needs the X extra" for a missing ``module``.

    Args:
        module: The missing import name.
        needed_by: What needed it, for the message (``"IPPO on mpe2.simple_spread_v3"``).
        path: The manifest field or option to name, if one is to blame.

    Returns:
        ``None`` when the module is not one an extra of ours provides.
    """
    extra = extra_of(module)
    if extra is None:
        return None
    return Problem(
        path,
        f"{needed_by} needs the {extra} extra ({module} is not installed); "
        f"install it with: {install_hint(extra)}",
    )


def missing_extra_error(
    exc: ModuleNotFoundError, needed_by: str, path: str = ""
) -> ConfigError | None:
    """The user error for ``exc`` when the missing module comes with one of our extras.

    Returns:
        A :class:`ConfigError` naming the extra and how to install it, or ``None``
        when the module is not one an extra of ours provides (a real bug).
    """
    problem = extra_problem(exc.name, needed_by, path)
    return None if problem is None else ConfigError([problem])


def installed(module: str) -> bool:
    """Whether ``module`` (a dotted import name) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def missing_extra(module: str) -> str | None:
    """``None`` when ``module`` is installed, else which extra installs it and how."""
    if installed(module):
        return None
    extra = extra_of(module)
    if extra is None:
        return f"{module} is not installed"
    return f"it needs the {extra} extra ({module} is not installed): {install_hint(extra)}"


def require(module: str, needed_by: str, path: str = "") -> None:
    """Raise the user error for ``module`` (an extra's package) when it is not installed.

    Args:
        module: The import name (``"wandb"``).
        needed_by: What needs it, for the message (``"logger=wandb"``).
        path: The manifest field or option to name.

    Raises:
        ConfigError: Naming the extra and how to install it.
    """
    if not installed(module):
        problem = extra_problem(module, needed_by, path)
        raise ConfigError(
            [problem or Problem(path, f"{needed_by} needs {module}, which is not installed")]
        )
