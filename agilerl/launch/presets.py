"""The conf groups an env's and a pair's presets live in, read without Hydra.

``train.py algorithm=dqn env=cartpole`` composes ``conf/env/cartpole.yaml`` and
``conf/tuned/dqn_cartpole.yaml`` under the command line's overrides.
:class:`~agilerl.trainer.LocalTrainer` given ``("DQN", "CartPole-v1")`` finds the same two
files by the env's id and the algorithm's registry name and layers them the same way, so
both APIs train the same manifest (``tests/launch/test_conf_matches_python_api.py`` checks
every pair against Hydra's composition).

Env group by id: the group whose ``name`` (``dataset`` for LLM data) is the env's and whose
``env_type`` is the algorithm's; where several fit (a discrete and a continuous variant of
one PettingZoo env), the one whose settings the given section does not contradict, then
the group with the shortest name (the plain variant).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from agilerl.arena.models.registry import MANIFEST_REGISTRY

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
TUNED_NETWORK = "tuned_network"
"""Where a ``conf/tuned/`` preset puts its network (see :func:`merge_tuned_network`)."""
TUNED_FOR = "tuned_for"
"""Key of a ``conf/tuned/`` file naming the env (``name`` or ``dataset``) it was tuned on."""
_ENCODER_KEYS = frozenset({"arch", "encoder_config", "simba"})


def _encoder_arch(network: Any) -> str | None:
    """The encoder kind a network section names (``arch``, ``encoder_config.arch``, ``simba``)."""
    if not isinstance(network, dict):
        return None
    encoder = network.get("encoder_config")
    arch = encoder.get("arch") if isinstance(encoder, dict) else None
    arch = arch or network.get("arch")
    return arch or ("simba" if network.get("simba") else None)


def merge_tuned_network(tuned: Any, network: Any) -> Any:
    """The network section, given a tuned preset's network and the chosen one.

    The chosen section (the ``network`` group plus ``network.*`` overrides, or the
    Python API's ``network``) is merged on top of the tuned network, so its fields win.
    When it names a different encoder (``network=simba`` on a preset tuned for an MLP),
    the tuned encoder settings are left out, since they only fit their own encoder; the
    tuned ``latent_dim`` and head still apply unless overridden.
    """
    if not isinstance(tuned, dict):
        return network
    if network is None:
        return tuned
    arch = _encoder_arch(network)
    if arch is not None and arch != _encoder_arch(tuned):
        tuned = {k: v for k, v in tuned.items() if k not in _ENCODER_KEYS}
    merged = OmegaConf.merge(OmegaConf.create(tuned), OmegaConf.create(network))
    return OmegaConf.to_container(merged)


def layered(base: Any, top: Any) -> Any:
    """``top`` over ``base``, mappings merged key by key (as Hydra composes groups and
    overrides); any other value of ``top`` replaces ``base``'s."""
    if not isinstance(base, dict) or not isinstance(top, dict):
        return base if top is None else top
    return {**base, **{k: layered(base.get(k), v) for k, v in top.items()}}


@cache
def _group(group: str) -> dict[str, dict[str, Any]]:
    """Every file of a conf group: stem -> its mapping (empty when conf/ is not shipped)."""
    folder = CONF_DIR / group
    if not folder.is_dir():
        return {}
    paths = sorted(folder.glob("*.yaml"))
    return {path.stem: yaml.safe_load(path.read_text()) or {} for path in paths}


def _env_key(section: dict[str, Any]) -> Any:
    return section.get("name") or section.get("dataset")


def _agrees(group: dict[str, Any], given: dict[str, Any]) -> bool:
    """Whether every setting the user gave that the group also sets has the group's value."""
    for key, value in given.items():
        if key not in group:
            continue
        if isinstance(value, dict) and isinstance(group[key], dict):
            if not _agrees(group[key], value):
                return False
        elif group[key] != value:
            return False
    return True


def algorithm_group(name: str) -> str | None:
    """The ``conf/algorithm`` group of a registry name or alias (``"Rainbow DQN"``)."""
    try:
        spec_cls = MANIFEST_REGISTRY.get(name)
    except (KeyError, ValueError):
        return None
    for stem, section in _group("algorithm").items():
        try:
            if MANIFEST_REGISTRY.get(section.get("name", "")) is spec_cls:
                return stem
        except (KeyError, ValueError):
            continue
    return None


def env_group(environment: dict[str, Any], env_type: str) -> str | None:
    """The ``conf/env`` group for an environment section (see the module docstring)."""
    key = _env_key(environment)
    if key is None or environment.get("entrypoint") is not None:
        return None  # the user's own env: env=custom, no preset
    kind = environment.get("env_type", env_type)
    fits = [
        stem
        for stem, group in _group("env").items()
        if _env_key(group) == key and str(group.get("env_type", "gym")) == str(kind)
    ]
    agreeing = [stem for stem in fits if _agrees(_group("env")[stem], environment)]
    return min(agreeing or fits, key=lambda stem: (len(stem), stem), default=None)


def preset_sections(algorithm: str, environment: dict[str, Any]) -> dict[str, Any]:
    """The manifest sections ``train.py algorithm=<a> env=<e>`` composes before overrides.

    Args:
        algorithm: Registry name or alias.
        environment: The environment section as given (an id becomes ``{"name": id}``).

    Returns:
        ``environment``, ``algorithm``, ``network``, ``replay_buffer`` and ``training``
        mappings from the env group and the pair's tuned preset (empty when neither exists).
    """
    algo = algorithm_group(algorithm)
    if algo is None:
        return {}
    spec_cls = MANIFEST_REGISTRY.get(algorithm)
    env = env_group(environment, str(spec_cls.env_type))
    if env is None:
        return {}
    required = {k: v for k, v in _group("algorithm")[algo].items() if k != "name"}
    sections: dict[str, Any] = {"environment": dict(_group("env")[env])}
    if required:
        sections["algorithm"] = required
    tuned = _group("tuned").get(f"{algo}_{env}", {})
    for name, value in tuned.items():
        if name == TUNED_NETWORK:
            sections["network"] = value
        elif name != TUNED_FOR:
            sections[name] = layered(sections.get(name, {}), value)
    return sections
