"""Our PPO against Stable-Baselines3's PPO on CartPole-v1, in one process tree.

Both use rl-zoo3's tuned CartPole set (8 envs x 32 steps, batch 256, 20 epochs,
gamma 0.98, gae_lambda 0.8, lr 1e-3 linear to 0, clip 0.2, ent 0) and SB3's
default network (separate 64-64 tanh actor and critic), one torch
thread, the same seeds, and the same evaluation cadence: 10 greedy episodes
every 5k env steps (evaluation time included), stopping at a mean >= 475 or
100k steps. Imports happen before the clock on both sides (SB3's at import,
ours on first use, so the bench imports them first). Prints env-steps/s and
wall seconds to solve for each run, and the ratios ours/SB3 (steps/s: higher
is better; time to solve: lower is better).

    pip install -e ".[bench]"
    python scripts/bench/ppo_cartpole_vs_sb3.py [--seeds 0 1 2] [--cpu-clock]

Results: benchmarks/ppo_cartpole_vs_sb3.md
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

TARGET = 475.0
MAX_STEPS = 100_000
EVAL_EVERY = 5_000
EVAL_EPISODES = 10
CLOCK = [time.perf_counter]  # --cpu-clock: process CPU time (steadier on a loaded machine)


# What a run imports on first use; imported before the clock starts, as SB3's are.
OUR_MODULES = (
    "agilerl.algorithms",
    "agilerl.envs.gym",
    "agilerl.hpo",
    "agilerl.training.train_on_policy",
    "matplotlib.pyplot",
)


def run_ours(seed: int, workdir: Path) -> dict[str, float | None]:
    from agilerl.trainer import LocalTrainer

    for module in OUR_MODULES:
        importlib.import_module(module)

    trainer = LocalTrainer(
        {
            "name": "PPO",
            "batch_size": 256,
            "learn_step": 256,
            "lr": 1e-3,
            "lr_schedule": {"kind": "linear", "end": 0.0},
            "gamma": 0.98,
            "gae_lambda": 0.8,
            "clip_coef": 0.2,
            "ent_coef": 0.0,
            "update_epochs": 20,
            "share_encoders": False,
        },
        {"name": "CartPole-v1", "num_envs": 8},
        {
            "max_steps": MAX_STEPS,
            "evo_steps": EVAL_EVERY,
            "eval_loop": EVAL_EPISODES,
            "target_score": TARGET,
        },
        # SB3's MlpPolicy: separate 64-64 tanh actor and critic, a linear output layer.
        network={
            "latent_dim": 64,
            "encoder_config": {
                "arch": "mlp",
                "hidden_size": [64],
                "activation": "Tanh",
                "output_activation": "Tanh",
                "layer_norm": False,
            },
            "head_config": {"hidden_size": [], "min_hidden_layers": 0, "layer_norm": False},
        },
        seed=seed,
        run_dir=workdir / f"ours_{seed}",
        verbose=False,
        presets=False,  # the settings above mirror SB3's; no tuned preset underneath
        logger={"tensorboard": False},
    )
    start = CLOCK[0]()
    trainer.train()
    wall = CLOCK[0]() - start
    summary = json.loads((workdir / f"ours_{seed}" / "summary.json").read_text())
    solved = summary["solved_at_step"]
    return {
        "steps": summary["total_steps"],
        "wall": wall,
        "steps_per_second": summary["total_steps"] / wall,
        "solved_at_step": solved,
        "time_to_solve": wall if solved is not None else None,
    }


def run_sb3(seed: int) -> dict[str, float | None]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + 99_991)

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        verbose=0,
        device="cpu",
    )
    solved: dict[str, float] = {}
    start = CLOCK[0]()

    class Record(StopTrainingOnRewardThreshold):
        def _on_step(self) -> bool:
            keep_going = super()._on_step()
            if not keep_going and "step" not in solved:
                solved["step"] = self.num_timesteps
                solved["wall"] = CLOCK[0]() - start
            return keep_going

    callback = EvalCallback(
        eval_env,
        eval_freq=EVAL_EVERY // 8,
        n_eval_episodes=EVAL_EPISODES,
        deterministic=True,
        callback_on_new_best=Record(reward_threshold=TARGET - 1e-9, verbose=0),
        verbose=0,
    )
    model.learn(total_timesteps=MAX_STEPS, callback=callback)
    wall = CLOCK[0]() - start
    return {
        "steps": model.num_timesteps,
        "wall": wall,
        "steps_per_second": model.num_timesteps / wall,
        "solved_at_step": solved.get("step"),
        "time_to_solve": solved.get("wall"),
    }


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if len(present) == len(values) and present else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--cpu-clock",
        action="store_true",
        help="time with process CPU time instead of wall time (for a shared, loaded machine)",
    )
    args = parser.parse_args()
    if args.cpu_clock:
        CLOCK[0] = time.process_time
    torch.set_num_threads(1)
    results: dict[str, list[dict[str, float | None]]] = {"ours": [], "sb3": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            results["ours"].append(run_ours(seed, Path(tmp)))
            results["sb3"].append(run_sb3(seed))
    print(f"{'run':6} {'seed':>4} {'steps':>7} {'steps/s':>9} {'solved@':>8} {'solve s':>8}")
    for name, rows in results.items():
        for seed, row in zip(args.seeds, rows, strict=True):
            solved = row["solved_at_step"]
            tts = row["time_to_solve"]
            print(
                f"{name:6} {seed:4d} {row['steps']:7d} {row['steps_per_second']:9,.0f} "
                f"{solved if solved is not None else '-':>8} "
                f"{f'{tts:.2f}' if tts is not None else '-':>8}"
            )
    ours_sps = statistics.median(r["steps_per_second"] for r in results["ours"])
    sb3_sps = statistics.median(r["steps_per_second"] for r in results["sb3"])
    print(
        f"\nmedian steps/s: ours {ours_sps:,.0f}  sb3 {sb3_sps:,.0f}  "
        f"ratio {ours_sps / sb3_sps:.2f}x (goal >= 3x)"
    )
    ours_tts = _median([r["time_to_solve"] for r in results["ours"]])
    sb3_tts = _median([r["time_to_solve"] for r in results["sb3"]])
    if ours_tts is not None and sb3_tts is not None:
        print(
            f"median seconds to solve: ours {ours_tts:.2f}  sb3 {sb3_tts:.2f}  "
            f"ratio {ours_tts / sb3_tts:.2f}x (goal <= 0.4x)"
        )
    else:
        print("time to solve: not every run reached the target; see the table")


if __name__ == "__main__":
    main()
