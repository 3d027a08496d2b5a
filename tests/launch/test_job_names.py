"""Sweep job directories keep every swept value readable (issue 33: seeds and Optuna's lr
were cut off after 60 characters of sorted overrides)."""

from __future__ import annotations

from agilerl.launch import MAX_JOB_NAME, job_dir_name
from tests.launch.sweep_helpers import QUICK


def _dirname(*overrides: str) -> str:
    """Hydra's ``override_dirname``: the job's overrides, sorted, joined by commas."""
    return ",".join(sorted(overrides))


def test_a_long_override_list_keeps_the_seed() -> None:
    quick = [o if o.startswith("training=") else f"++{o}" for o in QUICK]
    names = {seed: job_dir_name(_dirname(*quick, f"seed={seed}")) for seed in (0, 1)}
    assert "seed=0" in names[0] and "seed=1" in names[1]
    assert "max_steps=1024" in names[0] and "training.max_steps" not in names[0]


def test_optuna_learning_rates_stay_readable_and_names_stay_unique() -> None:
    a = job_dir_name(_dirname("algorithm.lr=0.000123456789", "algorithm.batch_size=64", "seed=2"))
    assert "lr=0.000123456789" in a and "seed=2" in a
    c, d = job_dir_name("algorithm.lr=0.1,seed=2"), job_dir_name("network.lr=0.1,seed=2")
    assert c.rsplit("-", 1)[0] == d.rsplit("-", 1)[0] and c != d  # same last keys: the digest


def test_names_are_bounded_and_file_system_safe() -> None:
    name = job_dir_name(_dirname(*(f"a.k{i}=/etc/{'x' * 40}" for i in range(20))))
    assert len(name) <= MAX_JOB_NAME + 9 and "/" not in name
    assert job_dir_name("") == "default"
