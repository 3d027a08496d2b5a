"""Our DQN, TD3 and SAC against Stable-Baselines3's, in one process tree, same seeds.

- DQN on CartPole-v1: SB3 with rl-zoo3's tuned set (lr 2.3e-3, batch 64, buffer 100k,
  1000 warm-up steps, train_freq 256 / gradient_steps 128, target update every 10
  steps, epsilon to 0.04 over 16% of 50k steps, 256x256 ReLU); ours with
  conf/tuned/dqn_cartpole.yaml (the same rates and warm-up, one update per 2 env
  steps, soft target updates). Both: 10 greedy episodes every 5k steps (evaluation
  time included), stop at a mean >= 475 or 100k steps.
- TD3 on Pendulum-v1, 20k steps: SB3 with rl-zoo3's set (lr 1e-3, gamma 0.98, buffer
  200k, 10k warm-up... capped here at 1000 like ours so both learn for the same
  steps, Gaussian noise 0.1, 400x300); ours with conf/tuned/td3_pendulum.yaml. Both
  evaluated every 2k steps on 10 episodes; the return at 20k steps is compared.
- SAC on Pendulum-v1, 20k steps: SB3 with rl-zoo3's set (lr 1e-3, SB3's defaults
  otherwise: batch 256, buffer 1M, tau 0.005, gamma 0.99, one update per step, learned
  entropy coefficient from 1.0, 256x256), warm-up 1000 steps like ours; ours with
  conf/tuned/sac_pendulum.yaml. Evaluated and compared as for TD3.

Prints env-steps/s (evaluation included; per wall second and per CPU second of this
single-threaded process, the latter steadier when other jobs share the cores) and, for
DQN, wall seconds to the threshold, as ratios ours/SB3. After training (untimed), both
final policies also play the same 50 seeded episodes ("paired" column): the training-time
evaluations see different start states, which on Pendulum move a 10-episode mean by tens
of points on their own.

    pip install -e ".[bench]"
    python scripts/bench/off_policy_vs_sb3.py [--seeds 0 1 2] [--skip-dqn] [--skip-td3] [--skip-sac]

``--peer-flush-denormal`` runs SB3 with subnormal floats flushed as our trainer does.

Results: benchmarks/off_policy_vs_sb3.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]


def _manifest(algorithm: str, env: str, *overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from agilerl.launch.compose import build_manifest
    from agilerl.launch.overrides import normalise_overrides

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        args = normalise_overrides(
            [f"algorithm={algorithm}", f"env={env}", *overrides], REPO / "conf"
        )
        return build_manifest(compose(config_name="config", overrides=args))[0]


def run_ours(
    algorithm: str, env: str, seed: int, workdir: Path, *overrides: str, flush: bool = True
) -> dict:
    from agilerl.trainer import LocalTrainer

    run_dir = workdir / f"{algorithm}_{seed}"
    trainer = LocalTrainer.from_manifest(
        _manifest(algorithm, env, *overrides),
        seed=seed,
        run_dir=run_dir,
        verbose=False,
        logger={"tensorboard": False},
        flush_denormal=flush,
    )
    start, cpu = time.perf_counter(), time.process_time()
    population, _ = trainer.train()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    agent = population[0]
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    last = dict(zip(header, rows[-1].split(","), strict=True))
    return {
        "steps": summary["total_steps"],
        "wall": wall,
        "steps_per_second": summary["total_steps"] / wall,
        "steps_per_cpu_second": summary["total_steps"] / cpu,
        "solved_at_step": summary["solved_at_step"],
        "time_to_solve": wall if summary["solved_at_step"] is not None else None,
        "final_return": float(last["fitness"]),
        "paired_return": paired_return(env, lambda obs: agent.act(obs, greedy=True)),
    }


PAIRED_ENVS = {"pendulum": "Pendulum-v1", "cartpole": "CartPole-v1"}
PAIRED_EPISODES = 50
PAIRED_SEED = 424_242


def paired_return(env: str, act: Any) -> float:
    """Greedy mean return of ``act`` on the same 50 seeded episodes, whoever trained it.

    The training-time evaluations of ours and SB3's see different start states; on
    Pendulum a 10-episode mean moves by ~30 with the starts alone, more than the
    differences being measured. This final evaluation (not timed) gives both the same
    starts, so the returns compare policies, not luck.
    """
    import gymnasium as gym
    import numpy as np

    envs = gym.make_vec(PAIRED_ENVS.get(env, env), num_envs=PAIRED_EPISODES)
    obs, _ = envs.reset(seed=PAIRED_SEED)
    total = np.zeros(PAIRED_EPISODES)
    alive = np.ones(PAIRED_EPISODES, dtype=bool)
    while alive.any():
        obs, reward, terminated, truncated, _ = envs.step(act(obs))
        total += reward * alive
        alive &= ~(terminated | truncated)
    envs.close()
    return float(total.mean())


class _EvalRecorder:
    """An SB3 callback: greedy evaluation every ``every`` steps; stops at ``target``."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.evaluation import evaluate_policy

        class Recorder(BaseCallback):
            def __init__(self, eval_env: Any, every: int, target: float | None) -> None:
                super().__init__()
                self.eval_env, self.every, self.target = eval_env, every, target
                self.start = time.perf_counter()
                self.solved: tuple[int, float] | None = None
                self.last_return = float("nan")
                self.next_eval = every

            def _on_step(self) -> bool:
                if self.num_timesteps < self.next_eval:
                    return True
                self.next_eval += self.every
                mean, _ = evaluate_policy(
                    self.model, self.eval_env, n_eval_episodes=10, deterministic=True
                )
                self.last_return = float(mean)
                if self.target is not None and mean >= self.target and self.solved is None:
                    self.solved = (self.num_timesteps, time.perf_counter() - self.start)
                    return False
                return True

        return Recorder(*args, **kwargs)


def run_sb3_dqn(seed: int) -> dict:
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
    model = DQN(
        "MlpPolicy",
        env,
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    recorder = _EvalRecorder(make_vec_env("CartPole-v1", n_envs=1, seed=seed + 1), 5000, 475.0)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=100_000, callback=recorder)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return _sb3_result(model, wall, cpu, recorder, "cartpole")


def run_sb3_td3(seed: int) -> dict:
    import numpy as np
    from stable_baselines3 import TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    model = TD3(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        gamma=0.98,
        buffer_size=200_000,
        learning_starts=1000,
        train_freq=1,
        gradient_steps=1,
        action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
        policy_kwargs={"net_arch": [400, 300]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    recorder = _EvalRecorder(make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 1), 2000, None)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=20_000, callback=recorder)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return _sb3_result(model, wall, cpu, recorder, "pendulum")


def run_sb3_sac(seed: int) -> dict:
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed)
    model = SAC(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        learning_starts=1000,
        train_freq=1,
        gradient_steps=1,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    recorder = _EvalRecorder(make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 1), 2000, None)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=20_000, callback=recorder)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return _sb3_result(model, wall, cpu, recorder, "pendulum")


def _sb3_result(model: Any, wall: float, cpu: float, recorder: Any, env: str) -> dict:
    solved = recorder.solved
    act = lambda obs: model.predict(obs, deterministic=True)[0]  # noqa: E731
    return {
        "steps": model.num_timesteps,
        "wall": wall,
        "steps_per_second": model.num_timesteps / wall,
        "steps_per_cpu_second": model.num_timesteps / cpu,
        "solved_at_step": solved[0] if solved else None,
        "time_to_solve": solved[1] if solved else None,
        "final_return": recorder.last_return,
        "paired_return": paired_return(env, act),
    }


def _table(name: str, rows: dict[str, list[dict]], seeds: list[int]) -> None:
    print(f"\n{name}")
    print(
        f"{'run':6} {'seed':>4} {'steps':>7} {'steps/s':>9} {'cpu':>7} {'solved@':>8} "
        f"{'solve s':>8} {'final':>8} {'paired':>8}"
    )
    for who, results in rows.items():
        for seed, r in zip(seeds, results, strict=True):
            solved = r["solved_at_step"] if r["solved_at_step"] is not None else "-"
            tts = f"{r['time_to_solve']:.1f}" if r["time_to_solve"] is not None else "-"
            print(
                f"{who:6} {seed:4d} {r['steps']:7d} {r['steps_per_second']:9,.0f} "
                f"{r['steps_per_cpu_second']:7,.0f} "
                f"{solved:>8} {tts:>8} {r['final_return']:8.1f} {r['paired_return']:8.1f}"
            )
    ours = statistics.median(r["steps_per_second"] for r in rows["ours"])
    sb3 = statistics.median(r["steps_per_second"] for r in rows["sb3"])
    print(f"median steps/s: ours {ours:,.0f}  sb3 {sb3:,.0f}  ratio {ours / sb3:.2f}x")
    ours = statistics.median(r["steps_per_cpu_second"] for r in rows["ours"])
    sb3 = statistics.median(r["steps_per_cpu_second"] for r in rows["sb3"])
    print(
        f"median steps per CPU second (this process; steadier on a shared machine): "
        f"ours {ours:,.0f}  sb3 {sb3:,.0f}  ratio {ours / sb3:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-td3", action="store_true")
    parser.add_argument("--skip-dqn", action="store_true")
    parser.add_argument("--skip-sac", action="store_true")
    parser.add_argument(
        "--no-flush-denormal",
        action="store_true",
        help="train ours with subnormal floats kept (the trainer flushes them by default)",
    )
    parser.add_argument(
        "--peer-flush-denormal",
        action="store_true",
        help="run SB3 with subnormal floats flushed too (it keeps them, as installed)",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    from agilerl.training.numerics import denormals_flushed

    flush = not args.no_flush_denormal
    print(
        f"subnormal floats flushed to zero: ours {'yes' if flush else 'no'}, "
        f"sb3 {'yes' if args.peer_flush_denormal else 'no'}"
    )

    def sb3(run: Any, seed: int) -> dict:
        with denormals_flushed(args.peer_flush_denormal):
            return run(seed)

    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_dqn:
            dqn = {"ours": [], "sb3": []}
            for seed in args.seeds:
                dqn["ours"].append(run_ours("dqn", "cartpole", seed, Path(tmp), flush=flush))
                dqn["sb3"].append(sb3(run_sb3_dqn, seed))
            _table(
                "DQN CartPole-v1 (target 475; goal: >= 3x steps/s, <= 0.5x time)", dqn, args.seeds
            )
            times = [
                (o["time_to_solve"], s["time_to_solve"])
                for o, s in zip(dqn["ours"], dqn["sb3"], strict=True)
            ]
            if all(a is not None and b is not None for a, b in times):
                ours_t = statistics.median(a for a, _ in times)
                sb3_t = statistics.median(b for _, b in times)
                print(
                    f"median seconds to 475: ours {ours_t:.1f}  sb3 {sb3_t:.1f}  "
                    f"ratio {ours_t / sb3_t:.2f}x"
                )
        pendulum = [("td3", run_sb3_td3, args.skip_td3), ("sac", run_sb3_sac, args.skip_sac)]
        for algorithm, run_sb3, skip in pendulum:
            if skip:
                continue
            rows = {"ours": [], "sb3": []}
            for seed in args.seeds:
                rows["ours"].append(
                    run_ours(
                        algorithm,
                        "pendulum",
                        seed,
                        Path(tmp),
                        "training.target_score=null",
                        flush=flush,
                    )
                )
                rows["sb3"].append(sb3(run_sb3, seed))
            _table(
                f"{algorithm.upper()} Pendulum-v1, 20k steps "
                "(goal: >= 5x steps/s, equal or better return)",
                rows,
                args.seeds,
            )
            for who in ("ours", "sb3"):
                final = statistics.median(r["final_return"] for r in rows[who])
                paired = statistics.median(r["paired_return"] for r in rows[who])
                print(
                    f"median return at 20k steps, {who}: {final:.1f} (own evaluation), "
                    f"{paired:.1f} (the same {PAIRED_EPISODES} seeded episodes for both)"
                )


if __name__ == "__main__":
    main()
