"""Evaluate a saved agent: mean and std of greedy episode returns, optionally a video.

    agilerl evaluate runs/2026-11-29/12-00-00_ppo_cartpole --episodes 20 --video cartpole.mp4

The path may be a run directory (its latest checkpoint), a checkpoint
directory, or one ``agent_<i>.pt`` file; the env comes from the run's
``manifest.yaml`` unless ``--env`` names a gymnasium id. A multi-agent run
(PettingZoo env) reports the return summed over agents and each agent's own
(:mod:`agilerl.evaluate_multi_agent`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agilerl.arena.models.env import GymEnvSpec, PettingZooEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.networks.spaces import same_space


@dataclass
class EvaluationResult:
    """Returns of the evaluated episodes."""

    returns: list[float]
    checkpoint: Path
    video: Path | None = None
    agent_returns: dict[str, list[float]] | None = None
    """Multi-agent runs: each agent's returns (``returns`` are their sums)."""

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


PATH_HINT = (
    "pass a run directory (the run_dir of a training run), one of its "
    "checkpoints/step_<n> directories or an agent_<i>.pt file"
)
"""The fix for a path that names no saved agent."""


def resolve_agent_file(path: Path, agent: int | None) -> Path:
    """The agent checkpoint file a user path stands for.

    Raises:
        ConfigError: If the path holds no agent checkpoint.
    """
    if path.is_file():
        if path.suffix in (".yaml", ".yml", ".json"):
            raise ConfigError(f"{path}: a manifest, not a saved agent; pass its run directory")
        return path
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory; {PATH_HINT}")
    checkpoints = path if (path / "latest").is_file() else path / "checkpoints"
    if (checkpoints / "latest").exists():
        from agilerl.training.checkpointing import CheckpointManager

        latest = CheckpointManager(checkpoints).latest_dir()
        if latest is None:
            raise ConfigError(
                f"{checkpoints}/latest names no checkpoint directory; pass one of "
                f"{checkpoints}/step_<n> instead"
            )
        path = latest
    files = [p for p in path.glob("agent_*.pt") if p.stem.split("_", 1)[1].isdigit()]
    files.sort(key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        if (path / "manifest.yaml").is_file():
            raise ConfigError(
                f"{path}: this run has saved no checkpoint yet (checkpoints/latest is missing); "
                "wait for its first checkpoint (training.checkpoint_steps) or train it again"
            )
        raise ConfigError(f"{path}: not a run directory (no checkpoints/latest); {PATH_HINT}")
    if agent is None:
        return files[0] if len(files) == 1 else _best(files)
    chosen = path / f"agent_{agent}.pt"
    if not chosen.exists():
        raise ConfigError(f"{chosen}: no such agent; have {', '.join(f.name for f in files)}")
    return chosen


def _best(files: list[Path]) -> Path:
    """The agent whose last recorded fitness is highest; unreadable files are skipped."""
    import warnings

    from agilerl.training.checkpointing import load_file

    scores: dict[Path, float] = {}
    for file in files:
        try:
            state = load_file(file)
        except ConfigError as error:
            warnings.warn(f"{error}; skipped", UserWarning, stacklevel=3)
            continue
        fitness = state.get("fitness")
        scores[file] = float(fitness[-1]) if fitness else float("-inf")
    if not scores:
        raise ConfigError(f"no readable agent checkpoint among {', '.join(map(str, files))}")
    return max(scores, key=lambda f: scores[f])


def load_algorithm(agent_file: Path, device: str = "cpu") -> Any:
    """The agent saved in ``agent_file``, rebuilt on ``device``.

    The file is read with ``torch.load(weights_only=True)``: a checkpoint is
    data and never runs code.

    Raises:
        ConfigError: Naming the file, if it is missing, truncated, corrupt or
            not an agilerl agent checkpoint.
    """
    from agilerl.algorithms.core.base import EvolvableAlgorithm
    from agilerl.training.checkpointing import load_file

    load_file(agent_file)  # a truncated file is named, not a traceback
    try:
        return EvolvableAlgorithm.load(agent_file, device=device)
    except ValueError as exc:
        raise ConfigError(
            f"{exc}; pass a checkpoint written by agilerl training (agent_<i>.pt)"
        ) from None


def find_env_spec(agent_file: Path, env_name: str | None) -> GymEnvSpec | PettingZooEnvSpec:
    """The env to evaluate in: ``--env``, else the run's manifest."""
    if env_name is not None:
        return GymEnvSpec(name=env_name, num_envs=1)
    for parent in agent_file.parents:
        manifest_file = parent / "manifest.yaml"
        if manifest_file.exists():
            environment = TrainingManifest.from_file(manifest_file).environment
            if not isinstance(environment, GymEnvSpec | PettingZooEnvSpec):
                raise ConfigError(f"evaluating on a {environment.env_type} env is not supported")
            return environment
    raise ConfigError(f"{agent_file}: no manifest.yaml above it; name the env with --env ID")


def evaluate_checkpoint(
    path: str | Path,
    *,
    episodes: int = 10,
    video: str | Path | None = None,
    env_name: str | None = None,
    agent: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    fps: int = 30,
    trust_code: bool = False,
) -> EvaluationResult:
    """Run greedy episodes of a saved agent.

    Args:
        trust_code: Allow an env that runs code named by the run's manifest
            (an entrypoint, a ``module:Id`` name); a run directory is data.

    Raises:
        ConfigError: For a missing/corrupt checkpoint, an unknown env, an env
            whose spaces differ from the agent's, or code without ``trust_code``.
    """
    from agilerl.algorithms.core.base import MultiAgentAlgorithm
    from agilerl.arena.models.trust import require_trust
    from agilerl.envs.gym import make_single_env
    from agilerl.launch.preflight import check_device

    check_device(device)
    agent_file = resolve_agent_file(Path(path), agent)
    env_spec = find_env_spec(agent_file, env_name)
    require_trust(env_spec, trust_code, str(agent_file))
    algo = load_algorithm(agent_file, device)
    multi_agent = isinstance(algo, MultiAgentAlgorithm)
    if multi_agent != isinstance(env_spec, PettingZooEnvSpec):
        raise ConfigError(
            f"{agent_file}: a {'multi' if multi_agent else 'single'}-agent {algo.spec.name} "
            f"cannot act in {env_spec.name}; evaluate in the env it was trained on "
            "(omit --env to use the run's manifest)"
        )
    if isinstance(env_spec, PettingZooEnvSpec):
        from agilerl.evaluate_multi_agent import run_multi_agent_episodes

        with VideoWriter.optional(video, fps) as writer:
            summed, per_agent = run_multi_agent_episodes(
                algo, env_spec, episodes=episodes, seed=seed, on_frame=writer
            )
        video_path = Path(video) if video else None
        return EvaluationResult(summed, agent_file, video_path, agent_returns=per_agent)
    env = make_single_env(env_spec, render_mode="rgb_array" if video else None)
    returns = []
    try:
        check_spaces(algo, env, env_spec)
        with VideoWriter.optional(video, fps) as writer:
            for episode in range(episodes):
                obs, _ = env.reset(seed=seed + episode)
                if hasattr(algo, "reset_state"):  # a recurrent policy starts from a zero state
                    algo.reset_state()
                total, done = 0.0, False
                while not done:
                    if writer is not None:
                        writer(env.render())
                    obs, reward, terminated, truncated, _ = env.step(greedy_action(algo, obs))
                    total += float(reward)
                    done = terminated or truncated
                returns.append(total)
    finally:
        env.close()
    return EvaluationResult(returns, agent_file, Path(video) if video else None)


def greedy_action(agent: Any, obs: Any) -> Any:
    """The agent's greedy env action for one (unbatched) observation.

    Uses the uniform ``act(obs, greedy=True)`` where the agent has it; older
    agents' ``get_action`` returns either the action batch (off-policy) or a
    tuple whose first item is it (PPO), and both are accepted. An agent whose
    ``acts_on_batches`` is false (a contextual bandit: ``obs`` is one step's
    ``[K, K * d]`` arm contexts) gets ``obs`` as it is and returns one action.
    """
    if not getattr(agent, "acts_on_batches", True):
        return np.asarray(agent.act(obs, greedy=True))
    batch = _batch(obs)
    act = getattr(agent, "act", None)
    out = act(batch, greedy=True) if callable(act) else agent.get_action(batch, greedy=True)
    if isinstance(out, tuple):
        out = out[0]
    return np.asarray(out)[0]


def check_spaces(agent: Any, env: Any, env_spec: GymEnvSpec) -> None:
    """Refuse an env whose observation or action space does not fit the agent.

    Raises:
        ConfigError: Naming both spaces and how to pick the right env.
    """
    for kind in ("observation", "action"):
        theirs = getattr(env, f"{kind}_space")
        ours = getattr(agent, f"{kind}_space", None)
        if ours is not None and not same_space(ours, theirs):
            raise ConfigError(
                f"--env {env_spec.name}: its {kind} space {theirs} does not match the agent's "
                f"{ours}; evaluate in the env the agent was trained on (omit --env to use the "
                "run's manifest)"
            )


def _batch(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: np.asarray(v)[None] for k, v in obs.items()}
    return np.asarray(obs)[None]


class VideoWriter:
    """Streams frames to the encoder as they are rendered (``.mp4`` via ffmpeg, ``.gif``):
    a long evaluation never holds its frames in memory (10 CartPole episodes are ~3.6 GB
    of frames)."""

    MACRO_BLOCK = 16
    """ffmpeg's block size: frames are padded to a multiple of it (imageio would resize
    them with a console warning)."""

    def __init__(self, path: Path, fps: int) -> None:
        # Frames are rendered off-screen: pygame needs no display or sound device, and
        # without these SDL prints an XDG_RUNTIME_DIR error on a headless machine.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        try:
            import imageio.v2 as imageio
        except ImportError:
            raise ConfigError(
                "--video needs the video extra: pip install 'agilerl[video]'"
            ) from None
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._writer = imageio.get_writer(path, mode="I", fps=fps)
        except (ValueError, OSError, RuntimeError) as exc:
            raise ConfigError(
                f"--video {path}: cannot write it ({exc}); use a .mp4 or .gif path"
            ) from None
        self.path, self.frames = path, 0

    def __call__(self, frame: Any) -> None:
        """Encode one ``rgb_array`` frame."""
        frame = np.asarray(frame)
        block = self.MACRO_BLOCK
        pad = [(0, -frame.shape[0] % block), (0, -frame.shape[1] % block)]
        if any(after for _, after in pad):
            frame = np.pad(frame, pad + [(0, 0)] * (frame.ndim - 2), mode="edge")
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self._writer.close()

    @classmethod
    @contextlib.contextmanager
    def optional(cls, path: str | Path | None, fps: int) -> Iterator[VideoWriter | None]:
        """A writer for ``path`` (closed at the end), or ``None`` without a path."""
        if not path:
            yield None
            return
        writer = cls(Path(path), fps)
        try:
            yield writer
        finally:
            writer.close()
