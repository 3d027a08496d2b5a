"""Our Recurrent PPO against sb3-contrib's RecurrentPPO on CartPoleNoVel-v1, in one invocation.

Both sides train with the same settings, one torch thread, the same seeds and
the same env budget, with no evaluation during training; at the end each side's
greedy policy plays the same seeded episodes. ``--preset tuned`` (default) is
``conf/tuned/recurrent_ppo_cartpole_novel.yaml``; ``--preset zoo`` is rl-zoo3's
``CartPoleNoVel-v1`` RecurrentPPO set (lr 1e-3 linear, gae_lambda 0.8, 20 epochs,
ReLU layers) on top of it. Both: 8 envs x 32 steps, batch 256, gamma 0.98, clip
0.2, no entropy bonus, a 64-unit LSTM for the actor and another for the critic,
one 64-unit layer after each. rl-zoo3 also normalises observations
(VecNormalize); neither side does here, so the settings stay the same.
Prints env steps/s, the greedy return, and the ratio ours / sb3-contrib.

    pip install -e ".[bench]"
    python scripts/bench/recurrent_ppo_vs_sb3_contrib.py [--steps 100000] [--seeds 0] [--preset zoo]

Results: benchmarks/recurrent_ppo_vs_sb3_contrib.md
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

EVAL_EPISODES = 20
CONF = Path(__file__).resolve().parents[2] / "conf"
PRESETS = {
    "tuned": [],
    "zoo": [
        "algorithm.lr=0.001",
        "algorithm.gae_lambda=0.8",
        "algorithm.update_epochs=20",
        "network.head_config.activation=ReLU",
    ],
}


def tuned_manifest(steps: int, preset: str) -> dict:
    """The shipped preset, composed as ``train.py algorithm=recurrent_ppo env=cartpole_novel``."""
    from hydra import compose, initialize_config_dir

    from agilerl.launch.compose import build_manifest
    from agilerl.launch.overrides import normalise_overrides

    overrides = [
        "algorithm=recurrent_ppo",
        "env=cartpole_novel",
        f"training.max_steps={steps}",
        f"training.evo_steps={steps}",
        "training.target_score=null",
        "training.eval_loop=1",
        "training.eval_steps=1",  # the comparison's evaluation comes after training
        *PRESETS[preset],
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=normalise_overrides(overrides, CONF))
    manifest, _ = build_manifest(cfg)
    return manifest.to_dict()


def run_ours(manifest: dict, seed: int, workdir: Path) -> dict[str, float]:
    from agilerl.evaluate import evaluate_checkpoint
    from agilerl.trainer import LocalTrainer

    run_dir = workdir / f"ours_{seed}"
    trainer = LocalTrainer.from_manifest(
        manifest, run_dir=run_dir, seed=seed, verbose=False, logger={"tensorboard": False}
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    steps = manifest["training"]["max_steps"]
    result = evaluate_checkpoint(run_dir, episodes=EVAL_EPISODES, seed=10_000 + seed)
    return {"steps": steps, "wall": wall, "steps_per_second": steps / wall, "eval": result.mean}


def run_sb3_contrib(manifest: dict, seed: int) -> dict[str, float]:
    import gymnasium as gym
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    from agilerl.envs.cartpole_novel import CARTPOLE_NOVEL_ID

    algo, network = manifest["algorithm"], manifest["network"]
    n_envs = manifest["environment"]["num_envs"]
    env = make_vec_env(CARTPOLE_NOVEL_ID, n_envs=n_envs, seed=seed)

    def linear(start: float):
        return lambda progress_remaining: progress_remaining * start

    activation = getattr(torch.nn, network["head_config"]["activation"])
    width = network["head_config"]["hidden_size"]
    model = RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=algo["learn_step"] // n_envs,
        batch_size=algo["batch_size"],
        n_epochs=algo["update_epochs"],
        gamma=algo["gamma"],
        gae_lambda=algo["gae_lambda"],
        learning_rate=linear(algo["lr"]),
        clip_range=algo["clip_coef"],
        ent_coef=algo["ent_coef"],
        vf_coef=algo["vf_coef"],
        max_grad_norm=algo["max_grad_norm"],
        policy_kwargs={
            "lstm_hidden_size": network["encoder_config"]["hidden_state_size"],
            "n_lstm_layers": network["encoder_config"]["num_layers"],
            "enable_critic_lstm": True,
            "net_arch": {"pi": width, "vf": width},
            "activation_fn": activation,
        },
        seed=seed,
        verbose=0,
        device="cpu",
    )
    steps = manifest["training"]["max_steps"]
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    eval_env = Monitor(gym.make(CARTPOLE_NOVEL_ID))
    eval_env.reset(seed=10_000 + seed)
    returns, _ = evaluate_policy(
        model,
        eval_env,
        n_eval_episodes=EVAL_EPISODES,
        deterministic=True,
        return_episode_rewards=True,
    )
    return {
        "steps": model.num_timesteps,
        "wall": wall,
        "steps_per_second": model.num_timesteps / wall,
        "eval": float(np.mean(returns)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tuned")
    args = parser.parse_args()
    torch.set_num_threads(1)
    manifest = tuned_manifest(args.steps, args.preset)
    results: dict[str, list[dict[str, float]]] = {"ours": [], "sb3c": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            results["ours"].append(run_ours(manifest, seed, Path(tmp)))
            results["sb3c"].append(run_sb3_contrib(manifest, seed))
    print(f"{'run':5} {'seed':>4} {'steps':>7} {'wall s':>7} {'steps/s':>8} {'greedy':>7}")
    for name, rows in results.items():
        for seed, row in zip(args.seeds, rows, strict=True):
            print(
                f"{name:5} {seed:4d} {row['steps']:7d} {row['wall']:7.1f} "
                f"{row['steps_per_second']:8,.0f} {row['eval']:7.1f}"
            )
    ours = statistics.median(r["steps_per_second"] for r in results["ours"])
    theirs = statistics.median(r["steps_per_second"] for r in results["sb3c"])
    ours_eval = statistics.median(r["eval"] for r in results["ours"])
    theirs_eval = statistics.median(r["eval"] for r in results["sb3c"])
    print(
        f"\nmedian steps/s: ours {ours:,.0f}  sb3-contrib {theirs:,.0f}  ratio {ours / theirs:.2f}x"
        f"\nmedian greedy return ({EVAL_EPISODES} episodes): ours {ours_eval:.1f}  "
        f"sb3-contrib {theirs_eval:.1f}"
    )


if __name__ == "__main__":
    main()
