"""Your own env through ``train.py``: its own run name, no other env's tuned preset.

Runs ``train.py`` in a fresh folder holding a user's module, as the README's "Your own
environment" section shows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHORT = ("training.max_steps=2048", "training.evo_steps=1024", "training.eval_steps=100")
USER_MODULE = '''
import gymnasium as gym
from gymnasium.envs.registration import register


def make(**kwargs):
    """A stand-in for your own env: CartPole under another name."""
    return gym.make("CartPole-v1", **kwargs)


# importing this module registers an id, as another package's import would
register(id="UserCartPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
         max_episode_steps=200)
'''


def _train(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "my_envs.py").write_text(USER_MODULE)
    return tmp_path


def _only_run(cwd: Path) -> Path:
    (run,) = (cwd / "runs").glob("*/*")
    return run


def test_an_entrypoint_env_trains_under_its_own_name_without_a_preset(user_dir: Path) -> None:
    done = _train(
        user_dir,
        "algorithm=ppo",
        "env=custom",
        "environment.name=MyCartPole-v0",
        "environment.entrypoint=my_envs:make",
        "environment.path=.",
        "trust_code=true",
        *SHORT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = _only_run(user_dir)
    assert "_ppo_mycartpole-v0_" in run.name  # not named after a shipped env group
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    from agilerl.arena.models.algorithms import PPOSpec

    # no conf/tuned/ preset: the spec's defaults, not ppo_cartpole's tuned values
    assert manifest["algorithm"]["lr"] == PPOSpec.model_fields["lr"].default
    assert manifest["algorithm"]["update_epochs"] == PPOSpec.model_fields["update_epochs"].default
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env"] == "MyCartPole-v0" and summary["total_steps"] >= 2048


@pytest.mark.slow  # three train.py processes (~10 s)
def test_an_id_registered_by_another_module_trains_with_trust_code(user_dir: Path) -> None:
    args = ("algorithm=ppo", "env=custom", "environment.name=my_envs:UserCartPole-v0", *SHORT)
    missing = _train(user_dir, *args, "trust_code=true")  # the folder is not on the path
    assert missing.returncode == 2 and "environment.path" in missing.stderr, missing.stderr
    args = (*args, "environment.path=.")
    refused = _train(user_dir, *args)
    assert refused.returncode == 2 and "trust_code" in refused.stderr, refused.stderr[-2000:]
    assert not (user_dir / "runs").exists()
    done = _train(user_dir, *args, "trust_code=true")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((_only_run(user_dir) / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] >= 2048


def test_a_preset_is_not_applied_to_an_env_it_was_not_tuned_on(tmp_path: Path) -> None:
    done = _train(tmp_path, "algorithm=ppo", "env=cartpole", "environment.name=Acrobot-v1")
    assert done.returncode == 2
    assert "tuned preset for CartPole-v1" in done.stderr and "env=custom" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
