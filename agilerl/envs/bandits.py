"""Contextual bandits built from a labelled table: one arm per class, reward 1 for the right one.

Each step draws one row ``x`` (``d`` features) of the table at random. The
agent sees one context per arm and pulls one arm; the reward is 1 when the
arm is the row's class and 0 otherwise, so the best arm always pays 1 and
the regret of a step is ``1 - reward``.

Context encoding (disjoint, per arm): with ``K`` arms the context of arm
``k`` is a vector of length ``K * d`` that is zero except for block ``k``,
which holds ``x``::

    arm 0: [x, 0, 0]      arm 1: [0, x, 0]      arm 2: [0, 0, x]     (K = 3)

so ``reset``/``step`` return a ``[K, K * d]`` array whose row ``k`` is the
context of arm ``k``. One network scoring a single context then learns a
separate linear read-out per arm in its first layer, and an agent that
picks arm ``k`` stores row ``k`` as the context of that pull. Features are
standardised (zero mean, unit variance per column) unless ``normalize`` is off.

Tables: scikit-learn's bundled datasets by name (``iris``, ``wine``,
``breast_cancer``, ``digits``; no network access), or a features file and a
targets file (CSV or Parquet, one row per sample; targets may be any labels,
sorted into arms ``0..K-1``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agilerl.arena.models.errors import ConfigError

SKLEARN_DATASETS = ("iris", "wine", "breast_cancer", "digits")


class BanditEnv:
    """A contextual bandit over the rows of ``features`` labelled by ``targets``.

    Args:
        features: ``[N, d]`` feature table.
        targets: ``[N]`` labels (any values; arms are their sorted unique values).
        seed: Seed of the row sampler.
        normalize: Standardise each feature column.
        name: Label for logs.

    Attributes:
        arms: Number of arms ``K`` (classes).
        arm_dim: Features per row ``d``.
        context_dim: Length ``K * d`` of one arm's context.
        observation_space: ``Box`` of one arm's context (``[K * d]``).
        action_space: ``Discrete(K)``.
        labels: The label of each arm.
    """

    def __init__(
        self,
        features: Any,
        targets: Any,
        *,
        seed: int | None = None,
        normalize: bool = True,
        name: str = "BanditEnv",
    ) -> None:
        x = np.asarray(features, dtype=np.float32)
        y = np.asarray(targets).reshape(-1)
        if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
            raise ConfigError(
                f"environment: features {x.shape} and targets {y.shape} must be a non-empty "
                "[N, d] table and N labels"
            )
        if normalize:
            std = x.std(axis=0)
            x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
        self.labels, self._targets = np.unique(y, return_inverse=True)
        self.arms = len(self.labels)
        if self.arms < 2:
            raise ConfigError("environment: the targets hold one class; a bandit needs two or more")
        self.name = name
        self._features = x.astype(np.float32)
        self.arm_dim = x.shape[1]
        self.context_dim = self.arms * self.arm_dim
        self.observation_space = spaces.Box(-np.inf, np.inf, (self.context_dim,), np.float32)
        self.action_space = spaces.Discrete(self.arms)
        self.single_observation_space = self.observation_space
        self.single_action_space = self.action_space
        self.num_envs = 1
        self.rng = np.random.default_rng(seed)
        self._row = 0

    def __len__(self) -> int:
        return len(self._features)

    def copy(self, seed: int | None = None) -> BanditEnv:
        """The same bandit (same table, same arms) with its own row sampler."""
        other = copy.copy(self)
        other.rng = np.random.default_rng(seed)
        return other

    def contexts(self, row: int) -> np.ndarray:
        """The ``[K, K * d]`` disjoint contexts of table row ``row``."""
        out = np.zeros((self.arms, self.arms, self.arm_dim), dtype=np.float32)
        out[np.arange(self.arms), np.arange(self.arms)] = self._features[row]
        return out.reshape(self.arms, self.context_dim)

    def target(self, row: int | None = None) -> int:
        """The right arm of ``row`` (default: the current row)."""
        return int(self._targets[self._row if row is None else row])

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reseed (optionally) and draw the first row's contexts."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        return self._next()

    def step(self, arm: int) -> tuple[np.ndarray, float]:
        """Pull ``arm``: the reward (1 for the right class) and the next row's contexts."""
        reward = float(int(arm) == self.target())
        return self._next(), reward

    def _next(self) -> np.ndarray:
        self._row = int(self.rng.integers(len(self._features)))
        return self.contexts(self._row)

    def close(self) -> None:
        """Nothing to release (for symmetry with gymnasium envs)."""


def _read_table(path: str | Path, field: str) -> np.ndarray:
    """A CSV (with a header row) or Parquet table as an array.

    Raises:
        ConfigError: Naming ``environment.<field>`` and the file for a missing, empty,
            unreadable or headerless table.
    """
    import pandas as pd

    path = Path(path)
    where = f"environment.{field}: {path}"
    if not path.is_file():
        raise ConfigError(f"{where} does not exist")
    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        elif path.suffix in (".csv", ".txt"):
            frame = pd.read_csv(path)
        else:
            raise ConfigError(f"{where} must be a .csv or .parquet file")
    except ConfigError:
        raise
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{where} is empty; write a header row and one row per context") from None
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ConfigError(f"{where} cannot be read as a table: {exc}") from None
    if path.suffix != ".parquet" and all(_is_number(str(c)) for c in frame.columns):
        raise ConfigError(
            f"{where}: the first row ({', '.join(map(str, frame.columns[:4]))}"
            f"{', ...' if len(frame.columns) > 4 else ''}) is data, not a header: add a header "
            "row of column names (the first row is always read as one, never guessed)"
        )
    if frame.empty:
        raise ConfigError(f"{where} has a header but no rows")
    return frame.to_numpy()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_values(x: np.ndarray, y: np.ndarray, features: Any, targets: Any) -> None:
    """Finite features, and whole-number class labels (one arm per class)."""
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        row, column = (int(i) for i in bad[0])
        raise ConfigError(
            f"environment.features: {features}: data row {row + 1}, column {column + 1} is "
            f"{x[row, column]} ({len(bad)} non-finite values in all); fill or drop those rows"
        )
    try:
        labels = y.astype(np.float64)
    except (TypeError, ValueError):
        return  # string class names: each distinct name is an arm
    bad_labels = np.flatnonzero(~np.isfinite(labels) | (labels != np.round(labels)))
    if len(bad_labels):
        row = int(bad_labels[0])
        raise ConfigError(
            f"environment.targets: {targets}: data row {row + 1} holds {y[row]}, not a class "
            f"label ({len(bad_labels)} such rows); targets are whole-number classes or names"
        )


def load_table(
    *,
    dataset: str | None = None,
    features: str | Path | None = None,
    targets: str | Path | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(features, targets)`` of a bundled dataset or of two files.

    Raises:
        ConfigError: For an unknown dataset name, a missing or unreadable file,
            non-numeric features, or tables of different lengths.
    """
    if dataset is not None:
        if dataset not in SKLEARN_DATASETS:
            raise ConfigError(
                f"environment.dataset: {dataset!r} is not a bundled table; choose one of "
                f"{', '.join(SKLEARN_DATASETS)}, or give features and targets files"
            )
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, f"load_{dataset}")()
        return np.asarray(bunch.data, dtype=np.float32), np.asarray(bunch.target)
    if features is None or targets is None:
        raise ConfigError("environment: give dataset, or both features and targets files")
    x = _read_table(features, "features")
    y = _read_table(targets, "targets")
    if y.ndim == 2 and y.shape[1] != 1:
        raise ConfigError(f"environment.targets: {targets} must have one column, has {y.shape[1]}")
    try:
        x = x.astype(np.float32)
    except ValueError:
        raise ConfigError(f"environment.features: {features} has non-numeric columns") from None
    if len(x) != len(y):
        raise ConfigError(f"environment: {features} has {len(x)} rows but {targets} has {len(y)}")
    y = y.reshape(-1)
    _check_values(x, y, features, targets)
    return x, y


def make_bandit_env(env_spec: Any, seed: int | None = None) -> BanditEnv:
    """The bandit a ``BanditEnvSpec`` names (``dataset`` or ``features``/``targets``).

    ``env_spec.env_config`` may set ``normalize`` (default true).

    Raises:
        ConfigError: If the spec names an entrypoint (code; not loaded here) or
            the table cannot be read.
    """
    if getattr(env_spec, "entrypoint", None):
        raise ConfigError(
            "environment.entrypoint: bandit envs from code are not loaded; give dataset, "
            "or features and targets files"
        )
    x, y = load_table(
        dataset=env_spec.dataset, features=env_spec.features, targets=env_spec.targets
    )
    options = dict(env_spec.env_config or {})
    return BanditEnv(
        x, y, seed=seed, normalize=bool(options.get("normalize", True)), name=env_spec.name
    )
