"""experiment=sft_chat and experiment=dpo_preference train for real on the tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.launch.compose import split_config
from agilerl.trainer import LocalTrainer

pytestmark = pytest.mark.llm
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("experiment", ["sft_chat", "dpo_preference"])
def test_experiment_trains_and_writes_a_run_directory(
    compose, tmp_path: Path, tiny_model_dir: Path, experiment: str, monkeypatch
) -> None:
    cfg = compose(
        f"experiment={experiment}",
        f"network.pretrained_model_name_or_path={tiny_model_dir}",
        "network.max_context_length=64",
        "algorithm.batch_size=4",
        "algorithm.lr=0.003",
        "algorithm.gradient_checkpointing=false",
        "training.max_steps=2",
        "training.evaluation_interval=2",
    )
    manifest = TrainingManifest.from_dict(split_config(cfg)[0])
    assert manifest.algorithm.max_model_len == 64
    monkeypatch.chdir(REPO)  # the preset's dataset paths are relative to the checkout
    run = tmp_path / "run"
    population, _ = LocalTrainer.from_manifest(manifest, run_dir=run, verbose=False).train()
    assert population[0].num_updates == 2
    assert (run / "manifest.yaml").is_file() and (run / "summary.json").is_file()
    rows = (run / "metrics.csv").read_text().splitlines()
    assert len(rows) == 2 and "loss" in rows[0]
    if experiment == "dpo_preference":
        assert "reward_accuracy" in rows[0]
    assert (run / "checkpoints" / "step_000000000002" / "adapter_0").is_dir()


def test_missing_local_model_names_the_fix(compose, tmp_path: Path) -> None:
    cfg = compose(
        "experiment=sft_chat", f"network.pretrained_model_name_or_path={tmp_path}/missing"
    )
    manifest = TrainingManifest.from_dict(split_config(cfg)[0])
    with pytest.raises(ConfigError, match="make_tiny_llm"):
        LocalTrainer.from_manifest(manifest, run_dir=tmp_path / "run", verbose=False).train()


@pytest.mark.parametrize("experiment", ["sft_chat", "grpo_countdown"])
def test_a_missing_local_model_fails_the_dry_run_but_not_a_scheduler_submission(
    compose, tmp_path: Path, experiment: str, monkeypatch
) -> None:
    """The model folder is checked where the run will happen: a dry run here refuses it
    (before anything is written), a job submitted to SLURM checks it on its node."""
    from agilerl.launch.preflight import preflight

    for name in (f"{tmp_path}/missing", "./missing-model", "models/missing-model"):
        cfg = compose(f"experiment={experiment}", f"network.pretrained_model_name_or_path={name}")
        manifest = TrainingManifest.from_dict(split_config(cfg)[0])
        with pytest.raises(ConfigError, match=r"pretrained_model_name_or_path: .*missing"):
            preflight(manifest, trust_code=True)
        preflight(manifest, trust_code=True, check_devices=False)
    hub = compose(f"experiment={experiment}", "network.pretrained_model_name_or_path=org/model")
    hub_manifest = TrainingManifest.from_dict(split_config(hub)[0])
    with pytest.raises(ConfigError, match="org/model is neither a local folder nor in the"):
        preflight(hub_manifest, trust_code=True)  # downloads are off in tests: not cached
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    preflight(hub_manifest, trust_code=True)  # with downloads on, left to the loader


def test_a_trainer_is_built_without_the_model_and_checks_it_when_it_trains(
    compose, tmp_path: Path
) -> None:
    from agilerl.trainer import LocalTrainer

    cfg = compose("experiment=sft_chat", f"network.pretrained_model_name_or_path={tmp_path}/gone")
    manifest = TrainingManifest.from_dict(split_config(cfg)[0])
    trainer = LocalTrainer.from_manifest(manifest, run_dir=tmp_path / "run", verbose=False)
    with pytest.raises(ConfigError, match="gone does not exist; build the tiny model"):
        trainer.train()
    assert not (tmp_path / "run").exists()  # refused before the run directory is claimed


def test_strategy_loop_takes_the_trainer_call(make_spec, make_env, tokenizer) -> None:
    from agilerl.arena.models.env import LLMEnvSpec
    from agilerl.arena.models.training import TrainingSpec
    from agilerl.builders.llm import LLMBuilder
    from agilerl.strategies import select_strategy
    from agilerl.training.run_context import RunContext

    spec = make_spec("SFT", batch_size=4)
    strategy = select_strategy(spec)
    training = TrainingSpec(num_epochs=1, evaluation_interval=1, max_steps=2, evo_steps=2)
    env_spec = LLMEnvSpec(
        env_type="dataset", objective="sft", dataset="data/sft.jsonl", max_reward=1.0
    )
    kwargs = strategy.get_trainer_kwargs(spec, training=training, env_spec=env_spec)
    # the spec whole; no max_reward (a rollout setting: the dataset loop takes no reward) and
    # no operators (the trainer adds them when training.hpo)
    assert kwargs == {"training": training}
    loop = strategy.get_training_loop(spec)
    env = make_env("sft")
    env.test.rows = env.test.rows[:4]
    agent = LLMBuilder.build(spec, tokenizer=tokenizer)
    from agilerl.logging.progress import TrainingProgress

    run = RunContext.ephemeral()
    run.progress = TrainingProgress(2, "sft", enabled=False)
    result = loop([agent], env, env_factory=None, run=run, **kwargs)
    population, fitnesses = result
    assert population[0].num_updates == 2
    # SFT fitness is minus the held-out loss of the trained weights
    held_out = population[0].evaluate(env.test.rows, env, batch_size=4)["loss"]
    assert fitnesses[0] == pytest.approx(-held_out, rel=1e-5)
    assert result.status == "completed" and result.total_steps == 2
    assert run.last_result is result


def test_grpo_countdown_trains_through_the_trainer_and_resumes(
    compose, tmp_path: Path, tiny_model_dir: Path, monkeypatch
) -> None:
    import csv
    import json

    from agilerl.launch.compose import build_manifest
    from agilerl.trainer import LocalTrainer

    monkeypatch.chdir(REPO)
    overrides = (
        "experiment=grpo_countdown",
        f"network.pretrained_model_name_or_path={tiny_model_dir}",
        "algorithm.batch_size=2",
        "algorithm.max_output_tokens=8",
        "training.evaluation_interval=2",
        "training.eval_samples_per_task=4",
        "training.checkpoint_steps=2",
        "training.evo_steps=2",
    )
    run = tmp_path / "run"
    manifest, _ = build_manifest(compose(*overrides, "training.max_steps=2"))
    LocalTrainer.from_manifest(manifest, run_dir=run, verbose=False).train()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] == 2
    manifest, _ = build_manifest(compose(*overrides, "training.max_steps=4"))
    population, _ = LocalTrainer.from_manifest(
        manifest, run_dir=run, verbose=False, resume=True
    ).train()
    assert population[0].num_updates == 4
    rounds = [int(r["step"]) for r in csv.DictReader((run / "rewards.csv").open())]
    assert rounds == [1, 2, 3, 4]
    evals = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["step"]) for r in evals] == [2, 4] and "pass_rate" in evals[0]
    assert len((run / "samples" / "step_000004_agent_0.jsonl").read_text().splitlines()) == 4


def test_the_run_seed_sets_an_llm_algorithm_seed(
    compose, tmp_path: Path, tiny_model_dir: Path, monkeypatch
) -> None:
    """``seed=`` reaches an LLM run (a sweep over seeds must not repeat one run)."""
    import csv

    import yaml

    from agilerl.launch.compose import build_manifest

    monkeypatch.chdir(REPO)
    manifest, _ = build_manifest(
        compose(
            "experiment=grpo_digits",
            f"network.pretrained_model_name_or_path={tiny_model_dir}",
            "training.max_steps=1",
            "training.evaluation_interval=1",
        )
    )

    def rewards(seed: int | None, name: str) -> tuple[list[str], dict]:
        run = tmp_path / name
        LocalTrainer.from_manifest(manifest, run_dir=run, seed=seed, verbose=False).train()
        table = [r["reward"] for r in csv.DictReader((run / "rewards.csv").open())]
        return table, yaml.safe_load((run / "manifest.yaml").read_text())

    first, written = rewards(1, "a")
    again, _ = rewards(1, "b")
    other, _ = rewards(2, "c")
    _, default_written = rewards(None, "d")
    assert first == again and first != other
    assert written["algorithm"]["seed"] == 1
    assert default_written["algorithm"]["seed"] == manifest.algorithm.seed


def test_rounds_without_reward_variance_are_reported(
    compose, tmp_path: Path, tiny_model_dir: Path, monkeypatch, capsys
) -> None:
    """The tiny random model scores 0 on every countdown answer: after five such rounds the
    run says that nothing is being learnt, and what to change."""
    from agilerl.launch.compose import build_manifest
    from agilerl.training.llm.train_llm_rollout import NO_SIGNAL_ROUNDS

    monkeypatch.chdir(REPO)
    manifest, _ = build_manifest(
        compose(
            "experiment=grpo_countdown",
            f"network.pretrained_model_name_or_path={tiny_model_dir}",
            f"training.max_steps={NO_SIGNAL_ROUNDS}",
            f"training.evaluation_interval={NO_SIGNAL_ROUNDS}",
            "algorithm.batch_size=2",
            "algorithm.max_output_tokens=8",
        )
    )
    LocalTrainer.from_manifest(manifest, run_dir=tmp_path / "run").train()
    err = capsys.readouterr().err
    assert f"for {NO_SIGNAL_ROUNDS} rounds every group's completions scored the same" in err
    assert "algorithm.group_size" in err


@pytest.mark.slow  # two SFT runs (~15 s)
def test_rows_cut_to_fit_the_context_are_counted_in_the_summary(
    compose, tmp_path: Path, tiny_model_dir: Path, monkeypatch, capsys
) -> None:
    import json

    from agilerl.launch.compose import build_manifest

    monkeypatch.chdir(REPO)

    def run(context: int) -> dict:
        manifest, _ = build_manifest(
            compose(
                "experiment=sft_chat",
                "training=smoke",
                f"network.pretrained_model_name_or_path={tiny_model_dir}",
                f"network.max_context_length={context}",
            )
        )
        LocalTrainer.from_manifest(manifest, run_dir=tmp_path / str(context)).train()
        return json.loads((tmp_path / str(context) / "summary.json").read_text())["data"]

    assert run(512) == {"train_rows": 270, "test_rows": 30, "dropped_too_long": 0,
                        "truncated_to_fit": 0}  # fmt: skip
    assert "cut to fit" not in capsys.readouterr().err
    tight = run(24)
    assert tight["truncated_to_fit"] > 0 and tight["train_rows"] + tight["test_rows"] == 300
    assert f"{tight['truncated_to_fit']} cut to fit network.max_context_length" in (
        capsys.readouterr().err
    )
