"""Image envs in the ``environment`` section: Atari preprocessing, frame stacking, layout.

The settings map onto gymnasium's own wrappers (``AtariPreprocessing``,
``FrameStackObservation``); :mod:`agilerl.envs.images` applies them. Which env
family an id belongs to is decided here from the id alone, so settings that
cannot apply are refused at validation without making the env: Atari
preprocessing needs an ALE id, and image settings are refused on the well-known
vector-observation ids. Any other id is checked when the env is first made
(``agilerl validate`` and dry runs make one copy).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from agilerl.arena.models.base import StrictModel

ImageFamily = Literal["ale", "minatar"]
IMAGE_NAMESPACES: dict[str, ImageFamily] = {"ALE/": "ale", "MinAtar/": "minatar"}
"""Gymnasium id prefix -> the image env family that registers it (the ``atari`` extra)."""
KNOWN_GYM_MODULES = ("ale_py",)
"""Modules a ``module:EnvId`` name may import without ``trust_code``: installed env suites
(``ale_py:ALE/Pong-v5``, the public implementation's spelling)."""


def bare_id(name: str) -> str:
    """The gymnasium id without a ``module:`` prefix (``ale_py:ALE/Pong-v5`` -> ``ALE/Pong-v5``)."""
    return name.split(":", 1)[1] if ":" in name else name


def image_family(name: str | None) -> ImageFamily | None:
    """``ale`` or ``minatar`` for an id of those suites (any ``module:`` prefix), else ``None``."""
    if not isinstance(name, str):
        return None
    bare = bare_id(name)
    for prefix, family in IMAGE_NAMESPACES.items():
        if bare.startswith(prefix):
            return family
    return None


class AtariPreprocessingSpec(StrictModel):
    """gymnasium's ``AtariPreprocessing`` for an ALE id (the Nature-DQN pipeline).

    The env is made with ``frameskip=1`` so this wrapper does the skipping (and
    max-pools the last two frames). Frames come out ``uint8``, ``[C, H, W]``.
    """

    noop_max: int = Field(30, ge=0, le=1000, description="Most no-op actions taken at reset.")
    frame_skip: int = Field(4, ge=1, le=16, description="Frames each action is repeated for.")
    screen_size: int = Field(84, ge=16, le=512, description="Side of the resized square frame.")
    grayscale_obs: bool = Field(True, description="Grey-scale frames (1 channel) instead of RGB.")
    terminal_on_life_loss: bool = Field(
        False, description="End the episode when a life is lost (not only at game over)."
    )


def image_settings_problem(spec: Any, vector_ids: Any) -> str | None:
    """Why the image settings of a gym env section cannot apply, or ``None`` if they can.

    Args:
        spec: A ``GymEnvSpec`` (``name``, ``entrypoint``, ``env_config`` and the image fields).
        vector_ids: Well-known ids; those outside the image families observe vectors.
    """
    family = image_family(spec.name) if spec.entrypoint is None else None
    atari = spec.atari_preprocessing
    if atari is not None and family != "ale":
        return (
            f"atari_preprocessing applies to ALE ids (ALE/Pong-v5, ALE/Breakout-v5...), not "
            f"{spec.entrypoint or spec.name!r}; remove it (frame_stack works on any image env)"
        )
    if atari is not None and "frameskip" in (spec.env_config or {}):
        return (
            "env_config.frameskip and atari_preprocessing.frame_skip both skip frames; "
            "set atari_preprocessing.frame_skip only (the env is made with frameskip=1)"
        )
    image_fields = [f for f in ("frame_stack", "channels_last") if _is_set(spec, f)]
    known_vector = family is None and bare_id(spec.name) in vector_ids
    if image_fields and known_vector and spec.entrypoint is None:
        return (
            f"{' and '.join(image_fields)}: for image observations only, but {spec.name} "
            "observes vectors; remove it"
        )
    return None


def _is_set(spec: Any, field: str) -> bool:
    return getattr(spec, field) != type(spec).model_fields[field].default
