"""Validation at startup speed: a dry run and ``agilerl validate`` import no training stack.

Each test runs the command as a user would (a fresh interpreter, ``-X importtime``)
and reads which modules were imported. This checks behaviour, not timing: torch,
gymnasium and the SLURM launcher's ``submitit`` are never needed to validate.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CARTPOLE = REPO / "tests" / "manifests" / "ppo_cartpole.yaml"
HEAVY = ("torch", "gymnasium", "submitit", "numpy")


def _run(args: list[str], cache: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {**os.environ, "AGILERL_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    modules = {
        match.group(1)
        for match in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", done.stderr, re.M)
    }
    return done, modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def _errors(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.splitlines()
    return "\n".join(line for line in lines if not line.startswith("import time"))


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory after one dry run of PPO on CartPole (which makes the env once)."""
    cache = tmp_path_factory.mktemp("agilerl_cache")
    done, modules = _run(["train.py", "algorithm=ppo", "env=cartpole", "dry_run=true"], cache)
    assert done.returncode == 0, _errors(done)
    assert "gymnasium" in modules  # the first check of an env makes it
    facts = json.loads((cache / "env_facts.json").read_text())
    (entry,) = facts["envs"].values()
    assert entry["shape"] == [4]
    return cache


def test_dry_run_imports_no_training_stack(warm_cache: Path) -> None:
    done, modules = _run(["train.py", "algorithm=ppo", "env=cartpole", "dry_run=true"], warm_cache)
    assert done.returncode == 0, _errors(done)
    assert "name: PPO" in done.stdout
    assert _heavy(modules) == []
    # The paradigm strategies are read for their manifest checks (TrainingStrategy.check);
    # the code that trains stays unimported.
    training_stack = ("agilerl.algorithms", "agilerl.networks", "agilerl.components")
    assert not any(m.startswith(training_stack) for m in modules)
    assert not any(m.startswith("agilerl.envs") for m in modules)


def test_remembered_env_still_refuses_a_cnn_on_vectors(warm_cache: Path) -> None:
    done, modules = _run(
        ["train.py", "algorithm=ppo", "env=cartpole", "network=cnn", "dry_run=true"], warm_cache
    )
    assert done.returncode == 2
    assert "cnn needs image observations" in done.stderr
    assert "CartPole-v1 observes vectors of shape (4,)" in done.stderr
    assert _heavy(modules) == []


def test_typo_exits_2_naming_the_field_without_the_training_stack(warm_cache: Path) -> None:
    done, modules = _run(
        ["train.py", "algorithm=ppo", "env=cartpole", "algorithm.clip_cof=0.3", "dry_run=true"],
        warm_cache,
    )
    assert done.returncode == 2
    assert "algorithm.clip_cof" in done.stderr and "did you mean clip_coef?" in done.stderr
    assert "Traceback" not in done.stderr
    assert _heavy(modules) == []


def test_validate_imports_no_training_stack(warm_cache: Path) -> None:
    # validate checks the env as a dry run does: remembered from the dry run above
    done, modules = _run(["-m", "agilerl.cli", "validate", str(CARTPOLE)], warm_cache)
    assert done.returncode == 0, _errors(done)
    assert done.stdout.startswith(f"ok: {CARTPOLE}")
    assert _heavy(modules) == []
    assert not any(m.startswith(("hydra", "omegaconf")) for m in modules)


def test_validate_finds_what_a_dry_run_finds(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text(CARTPOLE.read_text().replace("CartPole-v1", "CartPol-v1"))
    done, _ = _run(["-m", "agilerl.cli", "validate", str(typo)], tmp_path / "cache")
    assert done.returncode == 2
    assert "'CartPol-v1' is not a registered gymnasium id (did you mean CartPole-v1?)" in (
        done.stderr
    )


def test_a_gpu_device_is_still_checked(warm_cache: Path) -> None:
    done, _ = _run(
        ["train.py", "algorithm=ppo", "env=cartpole", "device=gpu0", "dry_run=true"], warm_cache
    )
    assert done.returncode == 2
    assert "device='gpu0' is not a torch device" in done.stderr
