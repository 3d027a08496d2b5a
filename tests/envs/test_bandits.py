"""Table bandits: the disjoint per-arm encoding, rewards, tables from files, user errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agilerl.arena.models.env import BanditEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.envs.bandits import SKLEARN_DATASETS, BanditEnv, load_table, make_bandit_env


@pytest.mark.parametrize("name", SKLEARN_DATASETS)
def test_bundled_tables_make_one_arm_per_class(name) -> None:
    env = make_bandit_env(BanditEnvSpec(dataset=name), seed=0)
    x, y = load_table(dataset=name)
    assert env.arms == len(np.unique(y)) and env.arm_dim == x.shape[1]
    contexts = env.reset(seed=0)
    assert contexts.shape == (env.arms, env.arms * env.arm_dim)
    assert env.observation_space.shape == (env.arms * env.arm_dim,)


def test_each_arm_sees_the_row_in_its_own_block() -> None:
    features = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    env = BanditEnv(features, ["b", "a", "c"], normalize=False, seed=0)
    contexts = env.contexts(0)
    np.testing.assert_array_equal(
        contexts,
        [[1, 2, 0, 0, 0, 0], [0, 0, 1, 2, 0, 0], [0, 0, 0, 0, 1, 2]],
    )
    assert list(env.labels) == ["a", "b", "c"]  # arms are the sorted labels
    assert env.target(0) == 1 and env.target(1) == 0


def test_reward_is_one_for_the_right_class_only() -> None:
    env = make_bandit_env(BanditEnvSpec(dataset="iris"), seed=0)
    env.reset(seed=4)
    for _ in range(20):
        right = env.target()
        wrong = (right + 1) % env.arms
        probe = env.copy()  # same row: compare the two pulls without moving env
        assert probe.step(wrong)[1] == 0.0
        assert env.step(right)[1] == 1.0


def test_features_are_standardised() -> None:
    env = make_bandit_env(BanditEnvSpec(dataset="wine"), seed=0)
    rows = np.stack([env.contexts(i)[0, : env.arm_dim] for i in range(len(env))])
    np.testing.assert_allclose(rows.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(rows.std(axis=0), 1.0, atol=1e-4)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_tables_from_files(tmp_path, suffix) -> None:
    x, y = load_table(dataset="iris")
    features, targets = tmp_path / f"x{suffix}", tmp_path / f"y{suffix}"
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    frame_x = pd.DataFrame(x, columns=[f"f{i}" for i in range(4)])
    frame_y = pd.DataFrame({"species": names})
    if suffix == ".csv":
        frame_x.to_csv(features, index=False)
        frame_y.to_csv(targets, index=False)
    else:
        frame_x.to_parquet(features)
        frame_y.to_parquet(targets)
    env = make_bandit_env(BanditEnvSpec(features=str(features), targets=str(targets)), seed=0)
    assert env.arms == 3 and len(env) == 150
    assert list(env.labels) == ["setosa", "versicolor", "virginica"]


def test_table_mistakes_are_config_errors(tmp_path) -> None:
    with pytest.raises(ConfigError, match="'mnist' is not a bundled table"):
        load_table(dataset="mnist")
    with pytest.raises(ConfigError, match=r"features: .*x\.csv does not exist"):
        load_table(features=tmp_path / "x.csv", targets=tmp_path / "y.csv")
    pd.DataFrame({"a": [1, 2, 3]}).to_csv(tmp_path / "x.csv", index=False)
    pd.DataFrame({"y": [0, 1]}).to_csv(tmp_path / "y.csv", index=False)
    with pytest.raises(ConfigError, match=r"has 3 rows but .*y\.csv has 2"):
        load_table(features=tmp_path / "x.csv", targets=tmp_path / "y.csv")
    with pytest.raises(ConfigError, match="one class"):
        BanditEnv(np.ones((3, 2)), [1, 1, 1])


def test_a_table_without_a_header_row_is_refused_not_shortened(tmp_path) -> None:
    """A CSV whose first row is data used to lose that row to pandas' header (149 of 150)."""
    (tmp_path / "x.csv").write_text("5.1,3.5\n4.9,3.0\n4.7,3.2\n")
    (tmp_path / "y.csv").write_text("label\n0\n1\n0\n")
    with pytest.raises(ConfigError, match=r"x.csv: the first row \(5.1, 3.5\) is data"):
        load_table(features=tmp_path / "x.csv", targets=tmp_path / "y.csv")
    (tmp_path / "x.csv").write_text("a,b\n5.1,3.5\n4.9,3.0\n4.7,3.2\n")
    x, y = load_table(features=tmp_path / "x.csv", targets=tmp_path / "y.csv")
    assert len(x) == len(y) == 3


@pytest.mark.parametrize(
    ("features", "targets", "message"),
    [
        ("", "label\n0\n", r"x.csv is empty"),
        ("a,b\n", "label\n", r"x.csv has a header but no rows"),
        ("a,b\n1,nan\n2,3\n", "label\n0\n1\n", r"data row 1, column 2 is nan"),
        ("a,b\n1,inf\n2,3\n", "label\n0\n1\n", r"data row 1, column 2 is inf"),
        ("a,b\n1,2\n2,3\n", "label\n0\n\n", r"x.csv has 2 rows but .*y.csv has 1"),
        ("a,b\n1,2\n2,3\n", "label\n0\n0.5\n", r"data row 2 holds 0.5, not a class label"),
        ("a,b\n1,x\n2,3\n", "label\n0\n1\n", r"non-numeric columns"),
    ],
)
def test_malformed_tables_are_config_errors_naming_the_file(
    tmp_path, features: str, targets: str, message: str
) -> None:
    (tmp_path / "x.csv").write_text(features)
    (tmp_path / "y.csv").write_text(targets)
    with pytest.raises(ConfigError, match=message):
        load_table(features=tmp_path / "x.csv", targets=tmp_path / "y.csv")


def test_a_corrupt_parquet_file_is_a_config_error(tmp_path) -> None:
    (tmp_path / "x.parquet").write_bytes(b"PAR1 not really parquet")
    pd.DataFrame({"y": [0]}).to_parquet(tmp_path / "y.parquet")
    with pytest.raises(ConfigError, match=r"x.parquet cannot be read as a table"):
        load_table(features=tmp_path / "x.parquet", targets=tmp_path / "y.parquet")
