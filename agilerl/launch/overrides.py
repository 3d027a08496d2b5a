"""Command-line overrides, checked and normalised before Hydra sees them.

Hydra refuses a key that no config file sets unless it is written ``+key=``
or ``++key=``. Manifest fields are checked by the manifest itself (with a
did-you-mean), so overrides of manifest sections are forced with ``++``:
``algorithm.clip_cof=0.3`` then reaches validation and fails there, naming
``clip_coef``, instead of failing inside Hydra with a generic message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agilerl.arena.models.errors import ConfigError, Problem, did_you_mean
from agilerl.extras import extra_problem, installed

MANIFEST_PREFIXES = (
    "algorithm",
    "environment",
    "network",
    "training",
    "replay_buffer",
    "mutation",
    "tournament_selection",
)
SECTION_SPELLINGS = {"env": "environment", "selection_strategy": "tournament_selection"}
RUN_OPTIONS = (
    "manifest",
    "dry_run",
    "resume",
    "seed",
    "device",
    "torch_threads",
    "flush_denormal",
    "run_dir",
    "trust_code",
    "accept_changed_inputs",
)


def config_groups(conf_dir: Path) -> dict[str, list[str]]:
    """Each config group under ``conf_dir`` and its options (file stems)."""
    groups: dict[str, list[str]] = {}
    for group in sorted(p for p in conf_dir.iterdir() if p.is_dir()):
        groups[group.name] = sorted(f.stem for f in group.glob("*.yaml"))
    return groups


def _split(arg: str) -> tuple[str, str, str] | None:
    """``(prefix, key, value)`` of an override like ``++a.b=1``, or ``None``."""
    if arg.startswith("-") or "=" not in arg:
        return None
    key, value = arg.split("=", 1)
    prefix = ""
    while key[:1] in ("+", "~"):
        prefix += key[0]
        key = key[1:]
    return prefix, key, value


# Hydra config-group options whose plugin needs a package from one of our extras
EXTRA_OPTIONS = {
    "hydra/launcher=local": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=slurm_cpu": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=slurm_gpu": "hydra_plugins.hydra_submitit_launcher",
    "hydra/sweeper=optuna": "optuna",
}


def _option_without_extra(arg: str) -> Problem | None:
    """The problem with a ``hydra/<group>=<option>`` argument whose extra is not installed."""
    option = arg.lstrip("+")
    module = EXTRA_OPTIONS.get(option)
    if module is None or installed(module):
        return None
    return extra_problem(module, option, option.split("=", 1)[0])


def normalise_overrides(args: Sequence[str], conf_dir: Path) -> list[str]:
    """Check group choices and top-level keys; force manifest field overrides.

    Args:
        args: Command-line arguments after the program name.
        conf_dir: The Hydra config directory.

    Returns:
        The arguments to hand to Hydra.

    Raises:
        ConfigError: For an unknown config group option (the options are
            listed) or an unknown top-level key.
    """
    groups = config_groups(conf_dir)
    problems: list[Problem] = []
    out: list[str] = []
    for arg in args:
        parts = _split(arg)
        if parts is None or parts[1].startswith("hydra"):
            if (problem := _option_without_extra(arg)) is not None:
                problems.append(problem)
            out.append(arg)
            continue
        prefix, key, value = parts
        head, _, rest = key.partition(".")
        if head in SECTION_SPELLINGS and rest:
            head = SECTION_SPELLINGS[head]
            key = f"{head}.{rest}"
        if rest and head in MANIFEST_PREFIXES:
            out.append(f"~{key}={value}" if prefix == "~" else f"++{key}={value}")
            continue
        if not rest and "/" not in key and key in groups:
            choices = [c.strip() for c in value.split(",")] if value else []
            for choice in choices:
                if choice in ("null", "") or choice.startswith(("choice(", "range(", "glob(")):
                    continue
                if choice not in groups[key]:
                    guess = did_you_mean(choice, groups[key])
                    hint = f" (did you mean {guess}?)" if guess else ""
                    problems.append(
                        Problem(
                            key,
                            f"no option {choice!r} in config group {key}{hint}; "
                            f"options: {', '.join(groups[key])}",
                        )
                    )
            out.append(arg)
            continue
        if rest and prefix == "" and head not in groups and head not in RUN_OPTIONS:
            known = sorted({*MANIFEST_PREFIXES, *groups} - {"hydra", "tuned"})
            guess = did_you_mean(head, known)
            hint = f" (did you mean {guess}.{rest}?)" if guess else ""
            problems.append(
                Problem(key, f"unknown section {head!r}{hint}; sections: {', '.join(known)}")
            )
            continue
        if not rest and prefix == "" and key not in RUN_OPTIONS and key not in groups:
            known = [*RUN_OPTIONS, *groups, *MANIFEST_PREFIXES]
            guess = did_you_mean(key, known)
            hint = f" (did you mean {guess}?)" if guess else ""
            problems.append(Problem(key, f"unknown option{hint}"))
            continue
        out.append(arg)
    if problems:
        raise ConfigError(problems, source="command line")
    return out
