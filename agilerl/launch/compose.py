"""From a composed Hydra config (or a manifest file) to a validated manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from agilerl.arena.models.errors import ConfigError, did_you_mean, problems_from_validation
from agilerl.arena.models.loading import read_manifest_file
from agilerl.arena.models.manifest import SECTIONS, TrainingManifest
from agilerl.launch import register_resolvers
from agilerl.launch.options import RunOptions
from agilerl.launch.overrides import MANIFEST_PREFIXES
from agilerl.launch.presets import TUNED_FOR, TUNED_NETWORK, merge_tuned_network
from agilerl.strategies import with_run_defaults

register_resolvers()

_NOT_MANIFEST = {"hydra"}
_MANIFEST_GROUPS = ("algorithm", "env", "network", "tuned", "training", "replay_buffer", "hpo")
"""Config groups that compose manifest sections: a manifest file or a resumed run chose them."""


def refuse_group_choices(overrides: Sequence[str], source: str) -> None:
    """Refuse config-group choices (``env=pendulum``, ``hpo=evolutionary``) on top of a manifest.

    They would be silently ignored: the manifest file (or the resumed run's
    manifest) already fixes every section.

    Raises:
        ConfigError: Naming each such override.
    """
    from agilerl.arena.models.errors import Problem

    problems = []
    for text in overrides:
        key, sep, value = text.lstrip("+~").partition("=")
        if sep and key in (*_MANIFEST_GROUPS, "experiment"):
            problems.append(
                Problem(
                    key,
                    f"{key}={value} cannot apply: {source} already chooses its {key} "
                    "(and every other section); override single fields instead "
                    "(e.g. training.max_steps=...)",
                )
            )
    if problems:
        raise ConfigError(problems, "command line")


def split_config(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Resolve ``cfg`` and split it into manifest sections and run options."""
    keys = [k for k in cfg if k not in _NOT_MANIFEST]
    data = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    assert isinstance(data, dict)
    if TUNED_NETWORK in data:
        data["network"] = merge_tuned_network(data.pop(TUNED_NETWORK), data.get("network"))
    check_tuned_env(data.pop(TUNED_FOR, None), data.get("environment"))
    manifest = {k: v for k, v in data.items() if k in SECTIONS and v is not None}
    options = {k: v for k, v in data.items() if k not in SECTIONS and k not in _NOT_MANIFEST}
    return manifest, options


def check_tuned_env(tuned_for: str | None, environment: dict[str, Any] | None) -> None:
    """Refuse a tuned preset composed in for an env the overrides replaced.

    A preset is picked by the ``algorithm`` and ``env`` group names; an
    ``environment.name``/``entrypoint`` override on top turns the run into another env,
    which must not inherit hyperparameters (and a budget and target) tuned elsewhere.

    Raises:
        ConfigError: Naming both envs and what to do instead.
    """
    if tuned_for is None:
        return
    env = environment or {}
    actual = env.get("name") or env.get("dataset")
    if env.get("entrypoint") is None and actual == tuned_for:
        return
    if env.get("entrypoint") is None and did_you_mean(str(actual), [tuned_for]) == tuned_for:
        return  # a typo of the preset's env: the env check names it ("did you mean ...?")
    shown = env.get("entrypoint") or actual
    raise ConfigError(
        f"environment: {shown} is not {tuned_for}, but the tuned preset for {tuned_for} "
        "(conf/tuned/) was composed in from the env group; for your own env use env=custom "
        "(no preset: environment.name=<id>, environment.entrypoint=<module:function> with "
        "trust_code=true for code of yours), or the env group that names it",
        "command line",
    )


def parse_run_options(options: dict[str, Any]) -> RunOptions:
    """Validate the run options.

    Raises:
        ConfigError: Naming the bad option.
    """
    from pydantic import ValidationError

    try:
        return RunOptions.model_validate(options)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation(exc, RunOptions), "command line") from None


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply Hydra-style manifest overrides (``algorithm.lr=1e-3``) to a manifest mapping.

    Group choices (``algorithm=dqn``) cannot be combined with a manifest file:
    the file already chose them.

    Raises:
        ConfigError: For a group choice or an unparsable override.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    refuse_interpolation(data)
    conf = OmegaConf.create(data)
    parser = OverridesParser.create()
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as exc:
            raise ConfigError(f"cannot parse override {text!r}: {exc}", "command line") from None
        key = override.key_or_group
        head = key.split(".", 1)[0]
        if head not in MANIFEST_PREFIXES:
            continue
        if "." not in key:
            raise ConfigError(
                f"{key}={override.value()}: a manifest file already chooses its {key}; "
                f"override single fields instead ({key}.<field>=<value>)",
                "command line",
            )
        if override.is_delete():
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(conf, parent)
            if isinstance(node, DictConfig) and leaf in node:
                del node[leaf]
            continue
        OmegaConf.update(conf, key, override.value(), merge=True, force_add=True)
    result = OmegaConf.to_container(conf, resolve=True)
    assert isinstance(result, dict)
    return result


def refuse_interpolation(node: Any, path: str = "") -> None:
    """Refuse ``${...}`` in a manifest file's values: resolving it could read environment
    variables (``${oc.env:TOKEN}``) or other keys into the run directory and the loggers.

    Interpolations stay available where the user types them: command-line overrides.

    Raises:
        ConfigError: Naming the key holding the interpolation.
    """
    if isinstance(node, dict):
        for key, value in node.items():
            refuse_interpolation(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            refuse_interpolation(value, f"{path}[{index}]")
    elif isinstance(node, str) and "${" in node:
        raise ConfigError(
            f"{path}: {node!r} is an interpolation; a manifest file holds values (resolving "
            "it could read environment variables into the run): write the value, or pass it "
            f"on the command line ({path}=...)",
            "manifest",
        )


def resumed_manifest_file(run_dir: Path) -> Path:
    """The ``manifest.yaml`` of a run directory to resume.

    Raises:
        ConfigError: If ``run_dir`` is missing or is not a run directory.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"resume={run_dir}: no such directory")
    manifest = run_dir / "manifest.yaml"
    if not manifest.exists() or not (run_dir / "checkpoints").is_dir():
        raise ConfigError(
            f"resume={run_dir}: not a run directory of agilerl (no manifest.yaml and "
            "checkpoints/); pass the directory an earlier train.py run wrote"
        )
    return manifest


def build_manifest(
    cfg: DictConfig, task_overrides: Sequence[str] = ()
) -> tuple[TrainingManifest, RunOptions]:
    """Validate the composed config (or the manifest file it names).

    Args:
        cfg: Hydra's composed config.
        task_overrides: The command-line overrides (re-applied onto a manifest file).

    Returns:
        The validated manifest (with the run defaults of
        :func:`~agilerl.strategies.with_run_defaults` written in) and run options.

    Raises:
        ConfigError: Listing every problem, each with its dotted path.
    """
    sections, raw_options = split_config(cfg)
    options = parse_run_options(raw_options)
    if options.resume:
        refuse_group_choices(task_overrides, f"resume={options.resume}")
        source = resumed_manifest_file(Path(options.resume))
        data = apply_overrides(read_manifest_file(source), task_overrides)
        return with_run_defaults(TrainingManifest.from_dict(data, source=str(source))), options
    if options.manifest:
        refuse_group_choices(task_overrides, f"manifest={options.manifest}")
        data = apply_overrides(read_manifest_file(options.manifest), task_overrides)
        return with_run_defaults(TrainingManifest.from_dict(data, source=options.manifest)), options
    return with_run_defaults(TrainingManifest.from_dict(sections)), options
