"""Checks that need the environment itself: made once, before a dry run passes or a run starts.

The manifest is validated without gymnasium; a few mistakes only show once the
env exists (an id that is not registered, a package the env needs, a CNN on
vector observations). Making one copy of the env costs milliseconds, but
importing gymnasium to make it costs most of a dry run. So what the checks
read (the observation space) is remembered after the first successful check,
in ``env_facts.json`` under the cache directory, keyed by the env's settings
and the installed gymnasium: later dry runs of the same env import nothing.
Only successes are remembered, so a mistake is always found by making the env.

The cache directory is ``$AGILERL_CACHE_DIR``, else ``$XDG_CACHE_HOME/agilerl``,
else ``~/.cache/agilerl``; ``AGILERL_CACHE_DIR=off`` turns the cache off.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest

CACHE_ENV = "AGILERL_CACHE_DIR"
FACTS_FILE = "env_facts.json"
_KEY_FIELDS = (
    "name",
    "env_config",
    "max_episode_steps",
    "default_type",
    "atari_preprocessing",
    "frame_stack",
    "channels_last",
    "action_mask",
)


def check_environment(manifest: TrainingManifest) -> None:
    """Make one copy of a gymnasium env (or recall it) and check it against the network section.

    Envs that run user code (``entrypoint``, ``custom``) are left alone: they
    are made when the run starts, which the user opted into.

    Raises:
        ConfigError: For an unknown id, a missing dependency (naming our extra),
            or an encoder that cannot read the observations.
    """
    spec = manifest.environment
    if not isinstance(spec, GymEnvSpec) or spec.entrypoint is not None or spec.custom:
        return
    facts = recall(spec)
    if facts is None:
        facts = _observe(spec)
        remember(spec, facts)
    _check_encoder(manifest, spec.name, facts)


def _observe(spec: GymEnvSpec) -> dict[str, Any]:
    from agilerl.envs.gym import make_single_env

    env = make_single_env(spec)
    try:
        if spec.action_mask == "info":
            env.reset(seed=0)  # the mask must be in the first info (else a ConfigError)
        space = env.observation_space
        shape = getattr(space, "shape", None)
        return {
            "shape": None if shape is None else [int(n) for n in shape],
            "describe": _describe(space),
        }
    finally:
        env.close()


def _check_encoder(manifest: TrainingManifest, name: str, facts: dict[str, Any]) -> None:
    network = manifest.network
    encoder = getattr(network, "encoder_config", None)
    arch = getattr(encoder, "arch", None)
    shape = facts.get("shape")
    if arch == "cnn" and (shape is None or len(shape) != 3):
        raise ConfigError(
            f"network.encoder_config.arch: cnn needs image observations (a 3-D Box, "
            f"channels first), but {name} observes {facts['describe']}; "
            "use network=mlp (or network=auto)"
        )
    # a Discrete index (shape ()) or an image; a Dict space is checked when the network is built
    vector = shape is None or len(shape) not in (0, 3)
    if getattr(network, "normalize_observations", False) and not vector:
        raise ConfigError(
            f"network.normalize_observations normalises vector observations, but {name} "
            f"observes {facts['describe']}; remove network.normalize_observations"
        )


def _describe(space: object) -> str:
    shape = getattr(space, "shape", None)
    if shape is not None and len(shape) == 1:
        return f"vectors of shape {tuple(shape)}"
    return type(space).__name__ if shape is None else f"{type(space).__name__} {tuple(shape)}"


# --- the cache ----------------------------------------------------------------------------
def cache_dir() -> Path | None:
    """Where remembered env facts live (``None`` when ``AGILERL_CACHE_DIR=off``)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return None if chosen.lower() == "off" else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agilerl"


def _gymnasium_key() -> str | None:
    """The installed gymnasium (its path and install time), found without importing it."""
    try:
        found = find_spec("gymnasium")
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin:
        return None
    try:
        stamp = os.stat(found.origin).st_mtime_ns
    except OSError:
        return None
    return f"{found.origin}:{stamp}:py{sys.version_info[0]}.{sys.version_info[1]}"


def _spec_key(spec: GymEnvSpec) -> str:
    return json.dumps({f: getattr(spec, f) for f in _KEY_FIELDS}, sort_keys=True, default=str)


def _load(path: Path, gym_key: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("gymnasium") != gym_key:
        return {}
    envs = data.get("envs")
    return envs if isinstance(envs, dict) else {}


def recall(spec: GymEnvSpec) -> dict[str, Any] | None:
    """The facts remembered for this env with the installed gymnasium, if any."""
    folder, gym_key = cache_dir(), _gymnasium_key()
    if folder is None or gym_key is None or spec.env_wrappers:
        return None
    facts = _load(folder / FACTS_FILE, gym_key).get(_spec_key(spec))
    return facts if isinstance(facts, dict) and "describe" in facts else None


def remember(spec: GymEnvSpec, facts: dict[str, Any]) -> None:
    """Store ``facts`` for this env (atomically; a cache that cannot be written is skipped)."""
    folder, gym_key = cache_dir(), _gymnasium_key()
    if folder is None or gym_key is None or spec.env_wrappers:
        return
    path = folder / FACTS_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        envs = _load(path, gym_key)
        envs[_spec_key(spec)] = facts
        with tempfile.NamedTemporaryFile(
            "w", dir=folder, prefix=".env_facts.", suffix=".tmp", delete=False
        ) as handle:
            json.dump({"gymnasium": gym_key, "envs": envs}, handle, indent=1, sort_keys=True)
        os.replace(handle.name, path)
    except OSError:
        return
