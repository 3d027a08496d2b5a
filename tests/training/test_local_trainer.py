"""LocalTrainer end to end: run directory, resume, bad input; PPO learning thresholds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from agilerl.arena.models import ConfigError, GymEnvSpec, PPOSpec
from agilerl.trainer import LocalTrainer

REPO = Path(__file__).resolve().parents[2]
PPO_CARTPOLE = {  # rl-zoo3's tuned CartPole set
    "name": "PPO",
    "batch_size": 256,
    "learn_step": 256,
    "lr": 1e-3,
    "lr_schedule": {"kind": "linear", "end": 0.0},
    "gamma": 0.98,
    "gae_lambda": 0.8,
    "ent_coef": 0.0,
    "update_epochs": 20,
    "share_encoders": False,
}
MLP = {
    "latent_dim": 64,
    "encoder_config": {"arch": "mlp", "hidden_size": [64], "layer_norm": False},
    "head_config": {"hidden_size": [64], "layer_norm": False},
}


def small_run(tmp_path: Path, **training: object) -> LocalTrainer:
    settings = {"max_steps": 4096, "evo_steps": 1024, "eval_loop": 2, "eval_steps": 200} | training
    return LocalTrainer(
        PPOSpec(learn_step=512, batch_size=128, update_epochs=2),
        GymEnvSpec(name="CartPole-v1", num_envs=4),
        settings,
        run_dir=tmp_path / "run",
        verbose=False,
    )


def test_accepts_names_dicts_and_specs(tmp_path: Path) -> None:
    by_name = LocalTrainer("PPO", "CartPole-v1", run_dir=tmp_path)
    assert by_name.spec.name == "PPO" and by_name.manifest.environment.name == "CartPole-v1"
    by_dict = LocalTrainer({"name": "DQN", "lr": 0.01}, {"name": "Acrobot-v1"})
    assert by_dict.spec.lr == 0.01
    with pytest.raises(ConfigError, match="clip_coef"):
        LocalTrainer({"name": "PPO", "clip_cof": 1}, "CartPole-v1")
    from_file = LocalTrainer.from_manifest(REPO / "tests/manifests/ppo_cartpole.yaml")
    assert from_file.manifest.training.pop_size == 4
    with pytest.raises(TypeError, match="unknown LocalTrainer options"):
        LocalTrainer.from_manifest(REPO / "tests/manifests/ppo_cartpole.yaml", sed=1)


def test_run_directory_contents(tmp_path: Path) -> None:
    population, fitnesses = small_run(
        tmp_path, pop_size=2, checkpoint_steps=4096, name="cartpole-pair"
    ).train()
    run = tmp_path / "run"
    assert len(population) == 2 and len(fitnesses) == 2
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    assert manifest["algorithm"]["name"] == "PPO" and manifest["training"]["pop_size"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["name"] == "cartpole-pair"  # training.name labels the run
    for key in (
        "algorithm",
        "env",
        "total_steps",
        "wall_seconds",
        "steps_per_second",
        "best_fitness",
        "final_fitness",
        "solved_at_step",
        "pop_size",
        "seed",
        "status",
        "checkpoint",
    ):
        assert key in summary, key
    assert summary["status"] == "completed" and summary["total_steps"] == 2 * 4096
    assert summary["solved_at_step"] is None
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    for column in (
        "step",
        "wall_seconds",
        "agent",
        "fitness",
        "train_return",
        "policy_loss",
        "lr",
        "hp_batch_size",
    ):
        assert column in header
    assert len(rows) == 1 + 2 * 4  # two agents, four evaluations each
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert (run / "plots" / "learning_curve.png").stat().st_size > 1000
    latest = (run / "checkpoints" / "latest").read_text().strip()
    checkpoint = run / "checkpoints" / latest
    assert sorted(p.name for p in checkpoint.iterdir()) == ["agent_0.pt", "agent_1.pt", "state.pt"]
    state = torch.load(checkpoint / "state.pt", weights_only=True)
    assert state["total_steps"] == 8192


def test_resume_continues_counters_and_metrics(tmp_path: Path) -> None:
    small_run(tmp_path, max_steps=2048, checkpoint_steps=1024).train()
    run = tmp_path / "run"
    rows_before = (run / "metrics.csv").read_text().splitlines()
    resumed = LocalTrainer.from_manifest(
        yaml.safe_load((run / "manifest.yaml").read_text())
        | {"training": {"max_steps": 4096, "evo_steps": 1024, "eval_loop": 2, "eval_steps": 200}},
        run_dir=run,
        resume=True,
        verbose=False,
    )
    population, _ = resumed.train()
    assert population[0].steps == 4096
    rows_after = (run / "metrics.csv").read_text().splitlines()
    assert rows_after[: len(rows_before)] == rows_before
    steps = [int(line.split(",")[0]) for line in rows_after[1:]]
    assert steps == [1024, 2048, 3072, 4096]
    assert json.loads((run / "summary.json").read_text())["total_steps"] == 4096


@pytest.mark.parametrize("ended", ["target_reached", "completed"])
def test_resuming_an_ended_run_trains_nothing_and_keeps_its_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture, ended: str
) -> None:
    # a target any policy meets at the first evaluation (CartPole pays 1 a step), or none
    target = {"target_score": 5.0} if ended == "target_reached" else {}
    small_run(tmp_path, max_steps=2048, **target).train()
    run = tmp_path / "run"
    summary = (run / "summary.json").read_text()
    rows = (run / "metrics.csv").read_text()
    assert json.loads(summary)["status"] == ended
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    again = LocalTrainer.from_manifest(manifest, run_dir=run, resume=True)
    population, _ = again.train()
    assert "this run had already ended" in capsys.readouterr().out
    assert (run / "summary.json").read_text() == summary
    assert (run / "metrics.csv").read_text() == rows
    # raising what ended it continues the run
    key, value = ("target_score", 1e9) if target else ("max_steps", 3072)
    manifest["training"][key] = value
    LocalTrainer.from_manifest(manifest, run_dir=run, resume=True, verbose=False).train()
    assert json.loads((run / "summary.json").read_text())["total_steps"] > population[0].steps


def test_a_run_killed_before_its_summary_gets_one_on_resume(tmp_path: Path) -> None:
    """Killed after its last checkpoint but before summary.json: the resume trains nothing
    and writes the summary the run never wrote."""
    small_run(tmp_path, max_steps=2048).train()
    run = tmp_path / "run"
    (run / "summary.json").unlink()
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    LocalTrainer.from_manifest(manifest, run_dir=run, resume=True, verbose=False).train()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] == 2048


def test_checkpoint_optimizer_false_writes_no_optimizer_state_and_resume_says_so(
    tmp_path: Path,
) -> None:
    from agilerl.training.checkpointing import read_agent_file

    sizes = {}
    for keep in (True, False):
        run = tmp_path / f"optimizer_{keep}"
        LocalTrainer(
            PPOSpec(learn_step=512, batch_size=128, update_epochs=2),
            GymEnvSpec(name="CartPole-v1", num_envs=4),
            {"max_steps": 1024, "evo_steps": 1024, "eval_loop": 1, "eval_steps": 100}
            | {"checkpoint_optimizer": keep},
            run_dir=run,
            verbose=False,
        ).train()
        agent_file = run / "checkpoints" / (run / "checkpoints/latest").read_text().strip()
        agent_file = agent_file / "agent_0.pt"
        state = read_agent_file(agent_file)
        assert (state["optimizers"] is not None) == keep
        sizes[keep] = agent_file.stat().st_size
    assert sizes[False] < sizes[True]  # Adam's two moments per weight are not written

    resumed = LocalTrainer.from_manifest(
        yaml.safe_load((run / "manifest.yaml").read_text())
        | {"training": {"max_steps": 2048, "evo_steps": 1024, "eval_loop": 1, "eval_steps": 100,
                        "checkpoint_optimizer": False}},
        run_dir=run,
        resume=True,
        verbose=False,
    )  # fmt: skip
    with pytest.warns(UserWarning, match="checkpoint_optimizer=false.*restart fresh"):
        population, _ = resumed.train()
    assert population[0].steps == 2048


def _reported_steps(run: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next(run.rglob("events.out.tfevents.*")).parent))
    events.Reload()
    return [e.step for e in events.Scalars("progress/steps_per_second")]


def test_reporting_interval_sets_how_often_progress_is_reported(tmp_path: Path) -> None:
    reported = {}
    for every in (None, 256):
        run = tmp_path / f"every_{every}"
        interval = {} if every is None else {"reporting_interval": every}
        LocalTrainer(
            PPOSpec(learn_step=128, batch_size=128, update_epochs=1),
            GymEnvSpec(name="CartPole-v1", num_envs=4),
            {"max_steps": 2048, "evo_steps": 1024, "eval_loop": 1, "eval_steps": 50} | interval,
            run_dir=run,
            verbose=False,
        ).train()
        reported[every] = _reported_steps(run)
    assert reported[None] == [1024, 2048]  # the spec's default, 1024 env steps
    assert reported[256] == [256 * k for k in range(1, 9)]


@pytest.mark.parametrize("algorithm", ["PPO", pytest.param("DQN", marks=pytest.mark.slow)])
def test_eval_max_concurrent_episodes_sizes_the_evaluation_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    import agilerl.envs.gym as gym_envs

    made: list[int] = []
    real = gym_envs.make_vector_env

    def recording(spec, num_envs=None, **kwargs):  # the real env, its size noted
        env = real(spec, num_envs, **kwargs)
        made.append(env.num_envs)
        return env

    monkeypatch.setattr(gym_envs, "make_vector_env", recording)
    sizes = {}
    for cap in (None, 2):
        made.clear()
        LocalTrainer(
            algorithm,
            GymEnvSpec(name="CartPole-v1", num_envs=4),
            {"max_steps": 512, "evo_steps": 512, "eval_loop": 6, "eval_steps": 50}
            | ({} if cap is None else {"eval_max_concurrent_episodes": cap}),
            run_dir=tmp_path / f"{algorithm}_{cap}",
            verbose=False,
        ).train()
        sizes[cap] = list(made)
    assert 6 in sizes[None] and 6 not in sizes[2]  # eval_loop copies, or the cap
    assert 2 in sizes[2]


def test_killed_run_resumes_and_finishes(tmp_path: Path) -> None:
    run = tmp_path / "killed"
    args = [
        sys.executable,
        str(REPO / "train.py"),
        "algorithm=ppo",
        "env=cartpole",
        f"run_dir={run}",
        "training.checkpoint_steps=1024",
        "training.evo_steps=1024",
        "training.max_steps=8192",
        "training.target_score=null",
        "training.eval_loop=1",
        "hydra.run.dir=" + str(tmp_path / "hydra"),
    ]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import time

    deadline = time.time() + 90
    while not (run / "checkpoints" / "latest").exists() and time.time() < deadline:
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    assert (run / "checkpoints" / "latest").exists()
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            f"resume={run}",
            "hydra.run.dir=" + str(tmp_path / "hydra2"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["total_steps"] >= 8192 and summary["status"] == "completed"
    steps = [int(line.split(",")[0]) for line in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == sorted(set(steps)) and steps[0] <= 1280


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda p: LocalTrainer("PPO", "CartPol-v1", run_dir=p, verbose=False),
            "did you mean CartPole-v1?",
        ),
        (
            lambda p: LocalTrainer("PPO", "CartPole-v1", run_dir=p, resume=True, verbose=False),
            "no checkpoint",
        ),
    ],
)
def test_user_errors_at_run_time(tmp_path: Path, make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make(tmp_path / "r").train()


def test_corrupt_checkpoint_names_the_file_and_changes_nothing(tmp_path: Path) -> None:
    small_run(tmp_path, max_steps=1024, checkpoint_steps=1024).train()
    run = tmp_path / "run"
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    agent_file = latest / "agent_0.pt"
    agent_file.write_bytes(agent_file.read_bytes()[:100])
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=str(agent_file)):
        LocalTrainer.from_manifest(
            run / "manifest.yaml", run_dir=run, resume=True, verbose=False
        ).train()
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert before == after


def test_nan_rewards_stop_naming_the_env_and_keep_the_checkpoint(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    trainer = LocalTrainer(
        PPOSpec(learn_step=64, batch_size=32, update_epochs=1),
        {
            "name": "NanReward-v0",
            "entrypoint": "nan_env:make",
            "num_envs": 2,
            "path": str(Path(__file__).parent),
        },
        {
            "max_steps": 1024,
            "evo_steps": 64,
            "eval_loop": 1,
            "eval_steps": 10,
            "checkpoint_steps": 64,
        },
        run_dir=tmp_path / "nan",
        verbose=False,
        trust_code=True,
    )
    # The env is at fault, and the error says so (issue 10, case 20), not "lower algorithm.lr".
    with pytest.raises(ConfigError, match=r"nan_env:make.*non-finite.*reward at env step"):
        trainer.train()
    summary = json.loads((tmp_path / "nan" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["checkpoint"]


def test_cartpole_solved_within_100k_steps_seed_0(tmp_path: Path) -> None:
    _assert_solves(tmp_path, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cartpole_solved_within_100k_steps(tmp_path: Path, seed: int) -> None:
    _assert_solves(tmp_path, seed=seed)


def _assert_solves(tmp_path: Path, seed: int) -> None:
    trainer = LocalTrainer(
        PPO_CARTPOLE,
        {"name": "CartPole-v1", "num_envs": 8},
        {"max_steps": 100_000, "evo_steps": 5000, "eval_loop": 10, "target_score": 475},
        network=MLP,
        seed=seed,
        run_dir=tmp_path / f"seed{seed}",
        verbose=False,
    )
    trainer.train()
    summary = json.loads((tmp_path / f"seed{seed}" / "summary.json").read_text())
    assert summary["status"] == "target_reached", summary
    assert summary["solved_at_step"] <= 100_000


@pytest.mark.slow
def test_pendulum_reaches_minus_400_within_200k_steps(tmp_path: Path) -> None:
    trainer = LocalTrainer(
        {
            "name": "PPO",
            "batch_size": 64,
            "learn_step": 4096,
            "lr": 1e-3,
            "gamma": 0.9,
            "gae_lambda": 0.95,
            "ent_coef": 0.0,
            "update_epochs": 10,
            "clip_coef": 0.2,
        },
        {"name": "Pendulum-v1", "num_envs": 4},
        {"max_steps": 200_000, "evo_steps": 10_000, "eval_loop": 10, "target_score": -400},
        network=MLP,
        seed=0,
        run_dir=tmp_path / "pendulum",
        verbose=False,
    )
    trainer.train()
    summary = json.loads((tmp_path / "pendulum" / "summary.json").read_text())
    assert summary["best_fitness"] >= -400, summary


def test_evaluate_command_reports_and_records_video(tmp_path: Path) -> None:
    small_run(tmp_path, max_steps=1024).train()
    video = tmp_path / "episodes.mp4"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "agilerl.cli",
            "evaluate",
            str(tmp_path / "run"),
            "--episodes",
            "2",
            "--video",
            str(video),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "return: " in out.stdout and " ± " in out.stdout and "95% CI [" in out.stdout
    assert video.stat().st_size > 1000
    # no stray lines from SDL (a headless machine) or imageio (a 600x400 frame)
    assert "XDG_RUNTIME_DIR" not in out.stderr and "macro_block_size" not in out.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "agilerl.cli", "evaluate", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_wandb_offline_logs_config_and_keeps_the_run_id_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    trainer = small_run(tmp_path, max_steps=1024, checkpoint_steps=1024)
    trainer.logger = trainer.logger.model_copy(update={"kind": "wandb"})
    trainer.train()
    run = tmp_path / "run"
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    state = torch.load(
        run / "checkpoints" / (run / "checkpoints/latest").read_text().strip() / "state.pt",
        weights_only=True,
    )
    run_id = state["wandb_id"]
    assert run_id and runs[0].name.endswith(run_id)
    resumed = LocalTrainer.from_manifest(
        run / "manifest.yaml",
        run_dir=run,
        resume=True,
        verbose=False,
        logger={"kind": "wandb"},
    )
    resumed.manifest.training.max_steps = 2048
    resumed.train()
    ids = {p.name.rsplit("-", 1)[-1] for p in (run / "wandb").glob("offline-run-*")}
    assert ids == {run_id}


def test_video_frames_are_streamed_to_the_encoder(tmp_path: Path, monkeypatch) -> None:
    """Issue 33: frames go to the encoder as rendered (none are kept), for .mp4 and .gif."""
    pytest.importorskip("imageio")
    import imageio.v2 as imageio

    from agilerl import evaluate as evaluation

    small_run(tmp_path, max_steps=1024).train()
    held: list[int] = []
    original = evaluation.VideoWriter.__call__

    def watch(self, frame) -> None:  # the encoder has every earlier frame already
        held.append(self.frames)
        original(self, frame)

    monkeypatch.setattr(evaluation.VideoWriter, "__call__", watch)
    for suffix in ("mp4", "gif"):
        held.clear()
        path = tmp_path / f"episodes.{suffix}"
        result = evaluation.evaluate_checkpoint(tmp_path / "run", episodes=2, video=path)
        steps = int(sum(result.returns))  # CartPole: one reward per step
        assert held == list(range(steps))
        if suffix == "mp4":
            assert imageio.get_reader(path).count_frames() == steps
        else:
            from PIL import Image

            with Image.open(path) as gif:  # (pillow merges identical consecutive frames)
                assert 1 < gif.n_frames <= steps
