"""Our IPPO and MATD3 vs the public AgileRL package on MPE speaker-listener (discrete).

    python scripts/bench/multi_agent_vs_agilerl.py              # 100k (IPPO) / 60k (MATD3) steps
    python scripts/bench/multi_agent_vs_agilerl.py --scale 0.2  # a fifth of both budgets

Both sides train one agent on ``mpe2.simple_speaker_listener_v4`` (8 env copies,
25-step episodes) with the same hyperparameters and budget (our
``conf/tuned/*_mpe_simple_speaker_listener.yaml`` values), then play the same
greedy episodes (``reset(seed=seed + i)`` of one env copy). Printed per
algorithm: training env steps per second (wall time of the training call) and
the mean greedy return summed over agents, for both, and the speed ratio.

The public package is also imported as ``agilerl`` and pins ``pettingzoo<1.27``,
so it runs in its own virtualenv (``.bench_venvs/agilerl_public``, made on first
use by :func:`peer_venv.ensure_venv`) as a subprocess started with that venv's
python and a working directory outside this repository (so our ``agilerl`` is
not on its path). It steps its env copies in subprocesses
(``AsyncPettingZooVecEnv``); ours steps them in process (``sync: true``).

Results: benchmarks/multi_agent_vs_agilerl.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(Path(__file__).resolve().parent)]

from peer_venv import VENVS, ensure_venv  # noqa: E402

PEER_PACKAGES = ["torch==2.13.0", "agilerl==2.58.0", "peft==0.21.0"]
ENV = "mpe2.simple_speaker_listener_v4"
NUM_ENVS = 8
NET = {
    "latent_dim": 64,
    "encoder_config": {"hidden_size": [64], "layer_norm": False},
    "head_config": {"hidden_size": [64], "layer_norm": False},
}
SETTINGS = {
    "IPPO": {
        "lr": 1e-3,
        "learn_step": 2048,
        "batch_size": 512,
        "gamma": 0.95,
        "gae_lambda": 0.95,
        "ent_coef": 0.01,
        "update_epochs": 4,
    },
    "MATD3": {
        "lr_actor": 1e-3,
        "lr_critic": 1e-3,
        "learn_step": 8,
        "batch_size": 256,
        "gamma": 0.95,
        "tau": 0.01,
        "policy_freq": 2,
        "vect_noise_dim": NUM_ENVS,
    },
}
BUDGET = {"IPPO": 100_000, "MATD3": 60_000}
MEMORY, LEARNING_DELAY = 100_000, 1000

PEER = r"""
import json, sys, time
import numpy as np
import torch
import mpe2.simple_speaker_listener_v4 as sl
from agilerl.algorithms import IPPO, MATD3
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.training.train_multi_agent_off_policy import train_multi_agent_off_policy
from agilerl.training.train_multi_agent_on_policy import train_multi_agent_on_policy
from agilerl.vector.pz_async_vec_env import AsyncPettingZooVecEnv

args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
torch.manual_seed(args["seed"])
np.random.seed(args["seed"])
make = lambda: sl.parallel_env(continuous_actions=False, max_cycles=25)
env = AsyncPettingZooVecEnv([make for _ in range(args["num_envs"])])
env.reset(seed=args["seed"])
agents = env.agents
obs_spaces = [env.single_observation_space(a) for a in agents]
act_spaces = [env.single_action_space(a) for a in agents]
cls = IPPO if args["algo"] == "IPPO" else MATD3
agent = cls(obs_spaces, act_spaces, agent_ids=agents, net_config=args["net"], **args["hp"])
steps = args["steps"]
start = time.perf_counter()
if cls is IPPO:
    train_multi_agent_on_policy(
        env, "speaker_listener", "IPPO", [agent], sum_scores=True, max_steps=steps,
        evo_steps=steps, eval_loop=1, verbose=False,
    )
else:
    memory = ReplayBuffer(max_size=args["memory"])
    train_multi_agent_off_policy(
        env, "speaker_listener", "MATD3", [agent], memory, sum_scores=True, max_steps=steps,
        evo_steps=steps, eval_loop=1, learning_delay=args["learning_delay"], verbose=False,
    )
wall = time.perf_counter() - start
env.close()
agent.set_training_mode(False)
single = make()
returns = []
with torch.no_grad():
    for i in range(args["episodes"]):
        obs, info = single.reset(seed=args["seed"] + 5000 + i)
        total = 0.0
        while single.agents:
            action = agent.get_action(obs, infos=info)[0]
            action = {a: np.asarray(action[a])[0] for a in single.agents}
            obs, reward, _, _, info = single.step(action)
            total += float(sum(reward.values()))
        returns.append(total)
print("RESULT " + json.dumps({"steps": agent.steps[-1] if isinstance(agent.steps, list) else steps,
                              "wall": wall, "returns": returns}))
"""


def run_ours(
    algo: str, steps: int, seed: int, episodes: int, threads: int = 1, flush: bool = True
) -> dict:
    """Train our agent, then play the greedy episodes."""
    import torch

    from agilerl.algorithms.ippo import IPPO
    from agilerl.algorithms.matd3 import MATD3
    from agilerl.arena.models.algorithms.ippo import IPPOSpec
    from agilerl.arena.models.algorithms.matd3 import MATD3Spec
    from agilerl.arena.models.env import PettingZooEnvSpec
    from agilerl.arena.models.training import TrainingSpec
    from agilerl.envs.pettingzoo import make_vector_env
    from agilerl.evaluate_multi_agent import run_multi_agent_episodes
    from agilerl.training.numerics import denormals_flushed
    from agilerl.training.run_context import RunContext
    from agilerl.training.train_multi_agent import (
        train_multi_agent_off_policy,
        train_multi_agent_on_policy,
    )

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    config = {"continuous_actions": False, "max_cycles": 25}
    env = make_vector_env(ENV, config, num_envs=NUM_ENVS)
    net = {**NET, "encoder_config": {"arch": "mlp", **NET["encoder_config"]}}
    if algo == "IPPO":
        spec = IPPOSpec(net_config=net, **SETTINGS[algo])
        agent = IPPO(spec, env.observation_spaces, env.action_spaces)
    else:
        spec = MATD3Spec(net_config=net, discrete_actions="gumbel_softmax", **SETTINGS[algo])
        agent = MATD3(spec, env.observation_spaces, env.action_spaces)
    start = time.perf_counter()
    with denormals_flushed(flush):  # LocalTrainer (train.py) flushes them by default
        if algo == "IPPO":
            training = TrainingSpec(max_steps=steps, evo_steps=steps)
            train_multi_agent_on_policy(
                [agent], env, training=training, run=RunContext.ephemeral(seed)
            )
        else:
            training = TrainingSpec(max_steps=steps, evo_steps=steps, learning_delay=LEARNING_DELAY)
            train_multi_agent_off_policy(
                [agent],
                env,
                training=training,
                memory_size=MEMORY,
                run=RunContext.ephemeral(seed),
            )
    wall = time.perf_counter() - start
    env.close()
    env_spec = PettingZooEnvSpec(name=ENV, env_config=config)
    returns, _ = run_multi_agent_episodes(agent, env_spec, episodes=episodes, seed=seed + 5000)
    return {"steps": agent.steps, "wall": wall, "returns": returns}


def run_peer(
    python: Path, algo: str, steps: int, seed: int, episodes: int, threads: int = 1
) -> dict:
    """Train the public package's agent in its venv (a subprocess outside this repository)."""
    args = {
        "algo": algo,
        "steps": steps,
        "seed": seed,
        "episodes": episodes,
        "num_envs": NUM_ENVS,
        "net": NET,
        "hp": SETTINGS[algo],
        "memory": MEMORY,
        "learning_delay": LEARNING_DELAY,
        "threads": threads,
    }
    with tempfile.TemporaryDirectory() as cwd:
        script = Path(cwd) / "peer_multi_agent.py"
        script.write_text(PEER)
        done = subprocess.run(
            [str(python), str(script), json.dumps(args)],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "HOME": cwd, "OMP_NUM_THREADS": str(threads)},
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"public AgileRL {algo} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of both budgets")
    parser.add_argument("--algorithms", default="IPPO,MATD3", help="comma-separated")
    parser.add_argument("--episodes", type=int, default=20, help="greedy episodes scored")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument(
        "--no-flush-denormal", action="store_true", help="keep subnormal floats on our side"
    )
    args = parser.parse_args()
    python = ensure_venv(VENVS / "agilerl_public", PEER_PACKAGES)
    import numpy as np

    for algo in args.algorithms.split(","):
        steps = max(2048, int(BUDGET[algo] * args.scale) // 2048 * 2048)
        ours = run_ours(
            algo, steps, args.seed, args.episodes, args.threads, not args.no_flush_denormal
        )
        peer = run_peer(python, algo, steps, args.seed, args.episodes, args.threads)
        rows = []
        for name, r in (("ours", ours), ("public AgileRL", peer)):
            sps = r["steps"] / r["wall"]
            rows.append(sps)
            print(
                f"{algo} {name:>15}: {r['steps']:,} env steps in {r['wall']:.1f} s = "
                f"{sps:,.0f} steps/s; greedy return (summed, {args.episodes} episodes) "
                f"{np.mean(r['returns']):.1f} ± {np.std(r['returns']):.1f}",
                flush=True,
            )
        print(f"{algo} steps/s ratio ours/public: {rows[0] / rows[1]:.2f}x", flush=True)


if __name__ == "__main__":
    main()
