"""Every ``training`` field acts on the run or is refused: per paradigm, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from agilerl.arena.models import ConfigError
from agilerl.arena.models.training import TrainingSpec
from agilerl.launch.compose import build_manifest
from agilerl.strategies import ALL_STRATEGIES, refuse_unused_training_fields, select_strategy
from agilerl.strategies.base import RUN_FIELDS

REPO = Path(__file__).resolve().parents[2]

# One non-default value per field that validates on its own (evo_epochs needs num_epochs
# and is covered by it; the run fields act everywhere).
SAMPLES: dict[str, str] = {
    "eval_steps": "7",
    "eval_loop": "3",
    "target_score": "1.0",
    "learning_delay": "5",
    "eps_start": "0.5",
    "eps_end": "0.01",
    "eps_decay": "0.9",
    "checkpoint_path": "ck",
    "evaluation_interval": "3",
    "eval_samples_per_task": "2",
    "eval_max_concurrent_episodes": "2",
    "num_epochs": "2",
    "episode_steps": "5",
    "sum_scores": "false",
    "experience_sharing": "false",
    "batched_population": "false",
    "fast_grad": "false",
    "env_resource_ratio": "0.5",
    "rollout_batch_size": "2",
    "rollout_engines_per_agent": "1",
    "training_gpus_per_agent": "2",
    "weight_sync_backend": "filesystem",
    "reuse_prefix_cache_across_syncs": "true",
    "weight_sync_interval": "2",
    "rollout_version_stamp": "publish",
}
# A run of every paradigm (algorithm, env), composed as train.py composes it.
RUNS = {
    "on-policy": ("algorithm=ppo", "env=cartpole"),
    "off-policy": ("algorithm=dqn", "env=cartpole"),
    "off-policy without epsilon": ("algorithm=td3", "env=pendulum"),
    "offline": ("algorithm=cqn", "env=cartpole_offline"),
    "contextual bandit": ("algorithm=neural_ucb", "env=iris_bandit"),
    "multi-agent on-policy": ("algorithm=ippo", "env=mpe_simple_spread"),
    "multi-agent off-policy": ("algorithm=maddpg", "env=mpe_simple_speaker_listener"),
    "LLM dataset": ("experiment=dpo_preference",),
    "LLM rollout": ("experiment=grpo_countdown",),
}


def test_every_training_field_is_read_by_some_paradigm_or_says_what_to_use() -> None:
    from agilerl.strategies import _INSTEAD

    acted = set(RUN_FIELDS) | {f for s in ALL_STRATEGIES for f in s.training_fields}
    unread = set(TrainingSpec.model_fields) - acted - set(_INSTEAD)
    assert not unread, f"training fields no paradigm reads: {sorted(unread)}"


@pytest.mark.parametrize("run", list(RUNS))
def test_unread_training_fields_are_refused_and_read_ones_accepted(compose, run: str) -> None:
    base, _ = build_manifest(compose(*RUNS[run]))
    strategy = select_strategy(base.algorithm)
    acted = strategy.acted_training_fields(base.algorithm)
    refused = []
    set_fields = base.training.model_dump(exclude_unset=True)
    for field, value in SAMPLES.items():
        try:  # the training section as the manifest validates it, with this one field set
            training = TrainingSpec.model_validate({**set_fields, field: value})
        except ValidationError:
            assert field not in acted, f"{run}: training.{field} fails validation alone"
            continue
        manifest = base.model_copy(update={"training": training})
        try:
            refuse_unused_training_fields(manifest)
        except ConfigError as error:
            assert f"training.{field}: {base.algorithm.name}" in str(error)
            assert f"remove training.{field}" in str(error)
            refused.append(field)
    assert sorted(refused) == sorted(set(SAMPLES) - acted)
    assert refused  # every paradigm leaves some fields to others


def test_epsilon_schedule_is_read_only_by_epsilon_greedy_algorithms(compose) -> None:
    for algorithm, env, refused in (("dqn", "cartpole", False), ("td3", "pendulum", True)):
        manifest, _ = build_manifest(
            compose(f"algorithm={algorithm}", f"env={env}", "training.eps_start=0.5")
        )
        if refused:
            with pytest.raises(ConfigError, match="other off-policy algorithms"):
                refuse_unused_training_fields(manifest)
        else:
            refuse_unused_training_fields(manifest)


def test_train_py_exits_2_naming_the_unread_field_and_what_reads_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "train.py", "algorithm=ppo", "env=cartpole",
         "training.learning_delay=100", f"run_dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "training.learning_delay: PPO (on-policy training) does not use it" in result.stderr
    assert "off-policy" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.slow  # two IPPO runs
def test_multi_agent_eval_max_concurrent_episodes_sizes_the_evaluation_env(
    compose, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pettingzoo")
    import agilerl.envs.pettingzoo as pz_envs
    from agilerl.trainer import LocalTrainer

    made: list[int] = []
    real = pz_envs.make_vector_env

    def recording(*args, **kwargs):  # the real env, its size noted
        env = real(*args, **kwargs)
        made.append(env.num_envs)
        return env

    monkeypatch.setattr(pz_envs, "make_vector_env", recording)
    sizes = {}
    for cap in (None, 3):
        made.clear()
        cap_override = () if cap is None else (f"training.eval_max_concurrent_episodes={cap}",)
        manifest, _ = build_manifest(
            compose("algorithm=ippo", "env=mpe_simple_spread", "algorithm.learn_step=200",
                    "training.max_steps=200", "training.evo_steps=200", "training.eval_steps=5",
                    *cap_override)
        )  # fmt: skip
        LocalTrainer.from_manifest(manifest, run_dir=tmp_path / f"run_{cap}", verbose=False).train()
        sizes[cap] = list(made)
    assert sizes[None] == [8, 8] and sizes[3] == [8, 3]  # training env, then evaluation env
