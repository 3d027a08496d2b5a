"""Checks that need the environment itself: made once, before a dry run passes or a run starts.

The manifest is validated without gymnasium; a few mistakes only show once the
env exists (an id that is not registered, a package the env needs, a CNN on
vector observations). Making one copy of the env costs milliseconds and turns
a crash in the middle of building the population into an error naming the fix.
"""

from __future__ import annotations

from agilerl.arena.models.env import GymEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest


def check_environment(manifest: TrainingManifest) -> None:
    """Make one copy of a gymnasium env and check it against the network section.

    Envs that run user code (``entrypoint``, ``custom``) are left alone: they
    are made when the run starts, which the user opted into.

    Raises:
        ConfigError: For an unknown id, a missing dependency (naming our extra),
            or an encoder that cannot read the observations.
    """
    spec = manifest.environment
    if not isinstance(spec, GymEnvSpec) or spec.entrypoint is not None or spec.custom:
        return
    from agilerl.envs.gym import make_single_env

    env = make_single_env(spec)
    try:
        _check_encoder(manifest, spec.name, env.observation_space)
    finally:
        env.close()


def _check_encoder(manifest: TrainingManifest, name: str, space: object) -> None:
    network = manifest.network
    encoder = getattr(network, "encoder_config", None)
    arch = getattr(encoder, "arch", None)
    shape = getattr(space, "shape", None)
    if arch == "cnn" and (shape is None or len(shape) != 3):
        raise ConfigError(
            f"network.encoder_config.arch: cnn needs image observations (a 3-D Box, "
            f"channels first), but {name} observes {_describe(space)}; "
            "use network=mlp (or network=auto)"
        )


def _describe(space: object) -> str:
    shape = getattr(space, "shape", None)
    if shape is not None and len(shape) == 1:
        return f"vectors of shape {tuple(shape)}"
    return type(space).__name__ if shape is None else f"{type(space).__name__} {tuple(shape)}"
