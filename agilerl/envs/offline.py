"""Offline datasets: read Minari datasets and MDP files, write them, fill a replay buffer.

Two sources of transitions, both read without a Python loop over rows:

* **Minari** (``minari_dataset_id``): datasets under ``MINARI_DATASETS_PATH``
  (default ``~/.minari/datasets``). Each episode holds ``T + 1`` observations
  and ``T`` actions, rewards, terminations and truncations. The dataset names
  the env it was recorded in (:meth:`OfflineDataset.env_id`).
* **MDP files** (``dataset_path``, ``.h5``/``.hdf5`` or ``.npz``): the flat
  d3rlpy ``MDPDataset`` layout, one row per step::

      observations      [N, *obs_shape]
      actions           [N] (or [N, 1])
      rewards           [N]
      terminals         [N]  1 where the action ended the episode in a terminal state
      episode_terminals [N]  1 on the last row of every episode (terminal or time limit)

  Row ``t`` holds ``s_t, a_t, r_t``; the next observation is row ``t + 1`` of
  the same episode. An episode that ends in a terminal state has ``T`` rows
  (the last with ``terminals = 1``). An episode cut by a time limit has
  ``T + 1`` rows: the extra last row holds the final observation only (its
  action and reward are ignored), ``terminals = 0``, ``episode_terminals = 1``;
  that episode's last transition bootstraps from the final observation.
  Files written by other tools without the extra row simply lose that one
  transition per truncated episode.

Transitions keep ``done`` (terminated) apart from ``truncated`` as the replay
buffer does: a truncated transition still bootstraps from ``next_obs``.
"""

from __future__ import annotations

import os
import warnings
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agilerl.arena.models.errors import ConfigError, input_errors

MDP_KEYS = ("observations", "actions", "rewards", "terminals", "episode_terminals")
HDF5_SUFFIXES = (".h5", ".hdf5")


@dataclass
class Episode:
    """One recorded episode.

    Attributes:
        observations: ``[T + 1, *obs_shape]``, the last one the final observation.
        actions: ``[T, ...]``.
        rewards: ``[T]``.
        terminated: The episode ended in a terminal state (else it was truncated).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool

    def __len__(self) -> int:
        return len(self.rewards)


@dataclass
class OfflineDataset:
    """Transitions of a fixed dataset, as flat arrays (row ``i`` is transition ``i``).

    Attributes:
        obs: ``[N, *obs_shape]``.
        action: ``[N, ...]``.
        reward: ``[N]`` float32.
        next_obs: ``[N, *obs_shape]`` (for terminal transitions: a copy of ``obs``, never used).
        terminated: ``[N]`` bool, the transition ended the episode in a terminal state.
        truncated: ``[N]`` bool, the transition was the last of an episode cut short.
        env_id: Gymnasium id the data was recorded in, if the source names one.
        observation_space: Observation space, if the source records it.
        action_space: Action space, if the source records it.
        source: File or dataset id (for error messages).
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    env_id: str | None = None
    observation_space: spaces.Space | None = None
    action_space: spaces.Space | None = None
    source: str = ""

    def __len__(self) -> int:
        return len(self.reward)

    @property
    def num_episodes(self) -> int:
        """Complete episodes (terminated or truncated)."""
        return int(self.terminated.sum() + self.truncated.sum())

    def check_fits(self, max_size: int) -> None:
        """Refuse a replay capacity smaller than the dataset.

        Raises:
            ConfigError: Naming ``replay_buffer.max_size`` and the size it needs.
        """
        if max_size < len(self):
            raise ConfigError(
                f"replay_buffer.max_size: {max_size:,} is smaller than the dataset "
                f"{self.source} ({len(self):,} transitions); set max_size >= {len(self)}"
            )

    def fill(self, memory: Any) -> None:
        """Add every transition to ``memory`` (a replay buffer) in one vectorised call.

        Raises:
            ConfigError: If the buffer is smaller than the dataset.
        """
        self.check_fits(memory.max_size)
        memory.add(
            self.obs,
            self.action,
            self.reward,
            self.next_obs,
            self.terminated,
            self.truncated,
            is_vectorised=True,
        )


# --- reading ----------------------------------------------------------------------
def _from_episodes(
    obs: list[np.ndarray], actions: list[np.ndarray], rewards: list[np.ndarray], ends: Any
) -> dict[str, np.ndarray]:
    """Flatten episodes of ``T + 1`` observations into transition arrays."""
    lengths = np.array([len(r) for r in rewards], dtype=np.int64)
    total = int(lengths.sum())
    terminated = np.zeros(total, dtype=bool)
    truncated = np.zeros(total, dtype=bool)
    last = np.cumsum(lengths) - 1
    ended = np.asarray(ends, dtype=bool)
    nonempty = lengths > 0
    terminated[last[nonempty & ended]] = True
    truncated[last[nonempty & ~ended]] = True
    return {
        "obs": np.concatenate([o[:-1] for o in obs]),
        "action": np.concatenate(actions),
        "reward": np.concatenate(rewards).astype(np.float32),
        "next_obs": np.concatenate([o[1:] for o in obs]),
        "terminated": terminated,
        "truncated": truncated,
    }


def minari_root() -> Path:
    """Where Minari keeps datasets (``MINARI_DATASETS_PATH``, read at call time)."""
    return Path(os.environ.get("MINARI_DATASETS_PATH", Path.home() / ".minari" / "datasets"))


def load_minari(dataset_id: str, *, remote: bool = False) -> OfflineDataset:
    """Read a Minari dataset into flat transition arrays.

    Args:
        dataset_id: e.g. ``"cartpole/replay-v0"``.
        remote: Download it from Minari's remote when it is not stored locally.

    Raises:
        ConfigError: If the dataset is not stored locally (and ``remote`` is off),
            or its observations are not plain arrays.
    """
    with input_errors(  # minari and h5py raise many types for damaged files
        f"environment.minari_dataset_id: {dataset_id!r} in {minari_root()} cannot be read",
        "record it again with scripts/make_offline_dataset.py",
    ):
        return _read_minari(dataset_id, remote)


def _read_minari(dataset_id: str, remote: bool) -> OfflineDataset:
    import minari

    local = set(minari.list_local_datasets())
    if dataset_id not in local:
        if not remote:
            known = ", ".join(sorted(local)) or "none"
            raise ConfigError(
                f"environment.minari_dataset_id: {dataset_id!r} is not in {minari_root()} "
                f"(local datasets: {known}); record one with scripts/make_offline_dataset.py, "
                "set MINARI_DATASETS_PATH, or set environment.remote: true to download it"
            )
        minari.download_dataset(dataset_id)
    data = minari.load_dataset(dataset_id)
    obs, actions, rewards, ends = [], [], [], []
    # The storage reads whole episodes as dicts, ~1.5x faster than iterate_episodes().
    for episode in data.storage.get_episodes(data.episode_indices):
        observations = episode["observations"]
        if not isinstance(observations, np.ndarray):
            raise ConfigError(
                f"environment.minari_dataset_id: {dataset_id!r} has dict/tuple observations; "
                "only array observations can be loaded"
            )
        obs.append(observations)
        actions.append(np.asarray(episode["actions"]))
        rewards.append(np.asarray(episode["rewards"]))
        terminations = np.asarray(episode["terminations"])
        ends.append(bool(terminations[-1]) if len(terminations) else False)
    if not rewards:
        raise ConfigError(f"environment.minari_dataset_id: {dataset_id!r} holds no episodes")
    env_spec = data.spec.env_spec
    return OfflineDataset(
        **_from_episodes(obs, actions, rewards, ends),
        env_id=env_spec.id if env_spec is not None else None,
        observation_space=data.observation_space,
        action_space=data.action_space,
        source=dataset_id,
    )


def _read_mdp_arrays(path: Path) -> dict[str, np.ndarray]:
    """The MDP arrays of a file :func:`check_mdp_path` accepted (HDF5, else ``.npz``)."""
    try:
        if path.suffix in HDF5_SUFFIXES:
            import h5py

            with h5py.File(path, "r") as handle:
                missing = [k for k in MDP_KEYS if k not in handle]
                present = [k for k in MDP_KEYS if k in handle]
                _check_expansion(
                    path,
                    sum(handle[k].size * handle[k].dtype.itemsize for k in present),
                    sum(handle[k].id.get_storage_size() for k in present),
                )
                arrays = {k: np.asarray(handle[k][()]) for k in present}
                env_id = handle.attrs.get("env_id")
        else:
            with zipfile.ZipFile(path) as archive:
                members = archive.infolist()
                _check_expansion(
                    path, sum(m.file_size for m in members), sum(m.compress_size for m in members)
                )
            with np.load(path, allow_pickle=False) as handle:
                missing = [k for k in MDP_KEYS if k not in handle.files]
                arrays = {k: handle[k] for k in MDP_KEYS if k in handle.files}
                env_id = handle["env_id"].item() if "env_id" in handle.files else None
    except (OSError, ValueError, EOFError, KeyError, RuntimeError, zipfile.BadZipFile) as exc:
        # (h5py raises RuntimeError for some corrupt internal structures)
        kind = "HDF5" if path.suffix in HDF5_SUFFIXES else "npz"
        raise ConfigError(
            f"environment.dataset_path: {path} is not a readable {kind} file ({exc}); "
            "record it again with python scripts/make_offline_dataset.py"
        ) from None
    bad = [k for k, v in arrays.items() if v.dtype == object or v.dtype.kind in "USV"]
    if bad:
        raise ConfigError(
            f"environment.dataset_path: {path}: {', '.join(bad)} must be numeric arrays"
        )
    if missing:
        raise ConfigError(
            f"environment.dataset_path: {path} lacks {', '.join(missing)} "
            f"(an MDP file needs {', '.join(MDP_KEYS)})"
        )
    _check_mdp_shapes(path, arrays)
    if env_id is not None:
        if isinstance(env_id, bytes):
            env_id = env_id.decode(errors="replace")
        arrays["env_id"] = np.asarray(str(env_id))
    return arrays


MAX_EXPANSION = 200
"""Most an MDP file's arrays may expand over the bytes it stores (compression)."""
SMALL_ARRAYS = 64 * 2**20
"""Bytes of arrays read whatever their expansion."""


def _check_expansion(path: Path, declared: int, stored: int) -> None:
    """Refuse a file whose arrays declare far more bytes than it stores (an HDF5 dataset
    of fill values, a zip bomb): a 3 KB file can otherwise ask for 36 GB."""
    if declared > SMALL_ARRAYS and declared > MAX_EXPANSION * max(stored, 1):
        raise ConfigError(
            f"environment.dataset_path: {path} declares {declared:,} bytes of arrays but "
            f"stores {stored:,}: it is corrupt or not a recorded dataset; record it again "
            "with python scripts/make_offline_dataset.py"
        )


def _check_mdp_shapes(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Observations ``[N, ...]``; the per-step keys ``[N]`` or ``[N, 1]`` (actions may be
    ``[N, d]``): anything else is refused naming the key and its shape."""
    for key, value in arrays.items():
        per_step = key not in ("observations", "actions")
        fits = value.ndim >= 1 and (
            not per_step or value.ndim == 1 or (value.ndim == 2 and value.shape[1] == 1)
        )
        if key == "actions":
            fits = value.ndim in (1, 2)
        if not fits:
            want = "[N, ...]" if key == "observations" else "[N] or [N, 1]"
            if key == "actions":
                want = "[N] or [N, action_dim]"
            raise ConfigError(
                f"environment.dataset_path: {path}: {key} has shape {list(value.shape)}, "
                f"expected {want}"
            )


MDP_SUFFIXES = (*HDF5_SUFFIXES, ".npz")


def check_mdp_path(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path`, once it names an existing MDP file.

    Raises:
        ConfigError: If the file is missing or not HDF5/``.npz``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"environment.dataset_path: {path} does not exist; record one with "
            f"python scripts/make_offline_dataset.py --out {path}"
        )
    if path.suffix not in MDP_SUFFIXES:
        raise ConfigError(f"environment.dataset_path: {path} is neither HDF5 (.h5/.hdf5) nor .npz")
    return path


def load_mdp_file(path: str | Path) -> OfflineDataset:
    """Read an MDP file (HDF5 or ``.npz``, layout in the module docstring).

    Raises:
        ConfigError: If the file is missing, of another format, lacks a key,
            or its arrays disagree in length.
    """
    path = check_mdp_path(path)
    arrays = _read_mdp_arrays(path)
    obs = arrays["observations"]
    n = len(obs)
    lengths = {k: len(arrays[k]) for k in MDP_KEYS}
    if len(set(lengths.values())) != 1:
        raise ConfigError(
            f"environment.dataset_path: {path} has arrays of unequal length {lengths}"
        )
    if n == 0:
        raise ConfigError(f"environment.dataset_path: {path} holds no rows")
    actions = arrays["actions"]
    if actions.ndim == 2 and actions.shape[1] == 1 and np.issubdtype(actions.dtype, np.integer):
        actions = actions[:, 0]
    terminals = arrays["terminals"].reshape(n).astype(bool)
    ends = arrays["episode_terminals"].reshape(n).astype(bool) | terminals
    ends[-1] = True  # a file cut mid-episode ends its last episode there
    # A non-terminal episode end holds only the final observation: it is no transition.
    final_only = ends & ~terminals
    keep = ~final_only
    next_index = np.minimum(np.arange(n) + 1, n - 1)
    next_index[terminals] = np.flatnonzero(terminals)  # never bootstrapped
    truncated = np.zeros(n, dtype=bool)
    truncated[:-1] = final_only[1:]
    return OfflineDataset(
        obs=obs[keep],
        action=actions[keep],
        reward=arrays["rewards"].reshape(n)[keep].astype(np.float32),
        next_obs=obs[next_index[keep]],
        terminated=terminals[keep],
        truncated=truncated[keep],
        env_id=str(arrays["env_id"]) if "env_id" in arrays else None,
        source=str(path),
    )


def load_offline_dataset(
    *, minari_dataset_id: str | None = None, dataset_path: str | None = None, remote: bool = False
) -> OfflineDataset:
    """Read the dataset an ``OfflineEnvSpec`` names (exactly one source).

    Raises:
        ConfigError: If neither or both sources are given, or the source cannot be read.
    """
    if (minari_dataset_id is None) == (dataset_path is None):
        raise ConfigError(
            "environment: set exactly one of minari_dataset_id (a Minari dataset) and "
            "dataset_path (an HDF5/.npz file)"
        )
    if minari_dataset_id is not None:
        field, dataset = "minari_dataset_id", load_minari(minari_dataset_id, remote=remote)
    else:
        field, dataset = "dataset_path", load_mdp_file(dataset_path)  # type: ignore[arg-type]
    check_finite(dataset, field)
    return dataset


def check_finite(dataset: OfflineDataset, field: str) -> None:
    """Refuse NaN or infinite observations, rewards or (continuous) actions when read.

    Raises:
        ConfigError: Naming ``environment.<field>``, the source, the array and the first
            transition holding a non-finite value.
    """
    for name in ("obs", "reward", "action", "next_obs"):
        values = getattr(dataset, name)
        if not np.issubdtype(values.dtype, np.floating):
            continue
        bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            label = {"obs": "observation", "next_obs": "next observation"}.get(name, name)
            raise ConfigError(
                f"environment.{field}: {dataset.source}: transition {first} has a non-finite "
                f"{label} ({int(bad.sum())} such transitions); fill or drop them before "
                "training (a NaN in the data would otherwise surface as a diverged run)"
            )


def check_dataset(
    dataset: OfflineDataset,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    *,
    env_name: str | None = None,
    algorithm: str = "CQN",
) -> None:
    """Refuse a dataset that does not fit the env the agent is evaluated in.

    Raises:
        ConfigError: For continuous actions (``algorithm`` needs Discrete), an
            observation shape or action range that differs from the env's.
    """
    where = f"dataset {dataset.source}"
    if not isinstance(action_space, spaces.Discrete) or not np.issubdtype(
        dataset.action.dtype, np.integer
    ):
        kind = type(action_space).__name__
        raise ConfigError(
            f"environment: {algorithm} needs discrete actions, but the env has a {kind} "
            f"action space and {where} stores {dataset.action.dtype} actions; pick a "
            "discrete-action env and dataset"
        )
    obs_shape = tuple(dataset.obs.shape[1:])
    if obs_shape != tuple(observation_space.shape or ()):
        raise ConfigError(
            f"environment: {where} has observations of shape {obs_shape}, the env "
            f"{env_name or ''} has {observation_space.shape}; record the dataset in this env"
        )
    low, high = int(dataset.action.min()), int(dataset.action.max())
    start, n = int(action_space.start), int(action_space.n)
    if low < start or high >= start + n:
        raise ConfigError(
            f"environment: {where} has actions in [{low}, {high}], the env has "
            f"{n} actions from {start}; record the dataset in this env"
        )
    if dataset.action_space is not None and dataset.action_space != action_space:
        raise ConfigError(
            f"environment: {where} was recorded with action space {dataset.action_space}, "
            f"the env has {action_space}"
        )
    if env_name and dataset.env_id and dataset.env_id != env_name:
        warnings.warn(
            f"{where} was recorded in {dataset.env_id}; evaluating in {env_name}",
            UserWarning,
            stacklevel=2,
        )


# --- writing ----------------------------------------------------------------------
def write_minari(
    dataset_id: str,
    episodes: Sequence[Episode],
    env_id: str,
    *,
    algorithm_name: str = "scripted",
    description: str | None = None,
) -> Any:
    """Write ``episodes`` as a Minari dataset (HDF5 storage, no jax needed).

    Args:
        dataset_id: e.g. ``"cartpole/scripted-eps0.5-v0"`` (replaced if it exists).
        episodes: The episodes.
        env_id: The gymnasium id they were recorded in (``recover_environment`` makes it).
        algorithm_name: Recorded in the dataset's metadata.
        description: Recorded in the dataset's metadata.

    Returns:
        The ``MinariDataset``.
    """
    import minari
    from minari.data_collector import EpisodeBuffer

    if dataset_id in minari.list_local_datasets():
        minari.delete_dataset(dataset_id)
    buffers = [
        EpisodeBuffer(
            id=i,
            observations=ep.observations,
            actions=ep.actions,
            rewards=np.asarray(ep.rewards, dtype=np.float64),
            terminations=_last_flag(len(ep), ep.terminated),
            truncations=_last_flag(len(ep), not ep.terminated),
            infos={},
        )
        for i, ep in enumerate(episodes)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # minari warns about optional metadata left out
        return minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            env=env_id,
            algorithm_name=algorithm_name,
            description=description,
            data_format="hdf5",
        )


def _last_flag(length: int, value: bool) -> np.ndarray:
    flags = np.zeros(length, dtype=bool)
    flags[-1] = value
    return flags


def episodes_to_mdp(episodes: Sequence[Episode]) -> dict[str, np.ndarray]:
    """The flat MDP arrays of ``episodes`` (layout in the module docstring)."""
    obs, actions, rewards, terminals, ends = [], [], [], [], []
    for ep in episodes:
        t = len(ep)
        rows = t if ep.terminated else t + 1
        action = np.asarray(ep.actions)
        obs.append(ep.observations[:rows])
        pad = rows - t
        actions.append(np.concatenate([action, np.zeros((pad, *action.shape[1:]), action.dtype)]))
        rewards.append(np.concatenate([np.asarray(ep.rewards, np.float32), np.zeros(pad)]))
        term = np.zeros(rows, dtype=np.uint8)
        end = np.zeros(rows, dtype=np.uint8)
        term[-1] = ep.terminated
        end[-1] = 1
        terminals.append(term)
        ends.append(end)
    return {
        "observations": np.concatenate(obs),
        "actions": np.concatenate(actions),
        "rewards": np.concatenate(rewards).astype(np.float32),
        "terminals": np.concatenate(terminals),
        "episode_terminals": np.concatenate(ends),
    }


def write_mdp_file(
    path: str | Path, episodes: Sequence[Episode], env_id: str | None = None
) -> Path:
    """Write ``episodes`` as an MDP file: HDF5 for ``.h5``/``.hdf5``, else ``.npz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = episodes_to_mdp(episodes)
    if path.suffix in HDF5_SUFFIXES:
        import h5py

        with h5py.File(path, "w") as handle:
            for key, value in arrays.items():
                handle.create_dataset(key, data=value)
            if env_id:
                handle.attrs["env_id"] = env_id
    elif path.suffix == ".npz":
        extra = {"env_id": np.asarray(env_id)} if env_id else {}
        np.savez(path, **arrays, **extra)
    else:
        raise ConfigError(f"--out: {path} must end in .h5, .hdf5 or .npz")
    return path
