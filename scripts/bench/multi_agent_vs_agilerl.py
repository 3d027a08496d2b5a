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

Measured (``--scale 0.2``, seed 0, 2 CPU cores, under heavy load from other jobs unless said; public
AgileRL 2.58.0, torch 2.13.0 on both sides; wall-clock ratios on this machine move by about
±0.3x between invocations):

* before the speed work: IPPO 687 vs 709 steps/s (0.97x), MATD3 204 vs 210 (0.97x);
* now, two invocations under load: IPPO 18,432 steps: ours 573 / 1,863 steps/s, greedy
  return -36.7, public 275 / 1,056 steps/s, -41.8 (2.08x / 1.76x); MATD3 10,240 steps: ours
  490 steps/s, -29.0, public 286 steps/s, -262.8 (1.71x);
* now, on the idle machine (load < 1): IPPO ours 5,500 vs public 1,596 steps/s (3.45x),
  MATD3 ours 1,192 vs 489 steps/s (2.44x), the same returns.

Better return at 3.45x (IPPO) and 2.44x (MATD3) the speed: the 3x goal is met for IPPO
only. Per vector step of 8 copies (CPU time, one process): env stepping 1.6 -> 0.5 ms (the
bare AEC env under PettingZoo's ``aec_to_parallel`` is stepped directly; mpe2's own world
step is now most of it), a MATD3 update 10 -> 6 ms (GradTape trunks, one backward per
phase, FlatAdam).

Then (MADDPG/MATD3 updates, same seeds, the learning tests still pass): twin critics run as
one stacked chain (``GradTape.stacked``, their tensors interleaved in the optimizer's flat
buffer and the targets packed alike), FlatAdam's fused one-pass kernel (about 100 -> 11 us
per step of a 22k-parameter critic pair), soft updates as one ``lerp_`` per flat buffer,
autograd-side input gradients handed on in one engine call per run of records, and the
MATD3 target Gumbel one-hot from the perturbed argmax: 441 -> 327 dispatched ops per update.
Measured under heavy load (load average 10-13 from other jobs on the 2 cores), so only
ratios mean much: a MATD3 update 5.34 -> 4.37 ms CPU (best of 3, main before vs after,
run alternately; MADDPG 5.42 -> 4.73), collection unchanged at about 0.8 ms; one
invocation ``--scale 0.2 --algorithms MATD3`` at load 12: ours 418 steps/s, greedy return
-31.0, public 149 steps/s, -262.8 (2.81x; the code before these changes measured 3.60x at
load 2-8 half an hour earlier: the ratio swings with the load, so this needs the
quiet-machine rerun). What is left of an update is mostly the matmuls (about half at batch
256) and per-op overhead of the two policies' critics, which differ only in the first
layer's input width (their hidden layers could run as one 4-member stack).

Quiet machine (load ~1), 2026-12-02, ``--scale 0.3 --algorithms MATD3``, all merged:
16,384 env steps, ours 1,400 steps/s, greedy return -30.2 +- 22.6; public 611 steps/s,
-53.6 +- 52.7: 2.29x at a better return (goal 3x: missed).

Then (2026-12-02, collection side): MADDPG/MATD3 act in numpy (the actors' CPU float32 chains;
Discrete samples by Gumbel-max from the agent's own noise generator instead of
``torch.multinomial``) and the multi-agent replay ``add`` writes through a numpy view of its
CPU storage. CPU time per vector step of 8 copies (one process, best of 2, main before vs
after, run alternately at load 3 from other jobs): acting 0.81 -> 0.46 ms, buffer add 0.37 ->
0.16 ms, sampling 0.37 ms, env step 1.6-2.0 ms and a MATD3 update 12-14.5 ms (both unchanged;
this machine was about 2.5x slower than the one above that day). ``--scale 0.2 --algorithms
MATD3``, before and after alternated, load 1.5-3: after ours 528 / 614 steps/s, public 128 /
237 (4.13x / 2.59x); before ours 595 / 352 / 474, public 227 / 204 / 207 (2.62x / 1.73x /
2.29x); greedy return ours -30.2 +- 24.6 after, -31.0 +- 25.7 before, public -262.8 +- 94.9.
The wall-clock ratio is set by the load on the peer's 8 env subprocesses more than by either
side's code (best of each: ours 614 vs 595 steps/s, public 237); the CPU saving is about 4%
of a vector step, so on the quiet machine expect roughly 2.4-2.5x: the 3x goal is still missed.
The update is matmul-bound: at batch 256, ~59M multiply-adds per MATD3 update (4 critic trunks
x target pass + forward + backward, the actors' passes) run at 20-30 GFLOP/s on one core here,
about half of an update's CPU time; batching the members of a stack does not make a matmul
cheaper per member (an N=4 ``bmm`` costs about 3.5x an N=1 one), so the 4-trunk stack of both
policies' critics would save only per-op dispatch (estimated under 5% of an update).
Quiet run with everything merged (2026-12-02 afternoon, load ~1, ``--scale 0.2 --algorithms
MATD3``): ours 10,240 env steps in 13.9 s = 736 steps/s, greedy return -30.2 +- 24.6; public
294 steps/s, -262.8 +- 94.9: 2.51x at a far better return (goal 3x: missed).

2026-12-02 evening, a faster host (~3.8 us per dispatched torch op, a 256x64x64 matmul in
15 us), idle (load < 1): ``--scale 0.2 --algorithms MATD3``: ours 2,394 vs public 809 steps/s
(2.96x; greedy return -30.8 +- 25.3 vs -262.8 +- 94.9); the full budget (``--algorithms MATD3``,
59,392 steps): ours 2,267 vs public 880 steps/s (2.57x; -21.3 +- 18.1 vs -39.7 +- 37.8). The 3x
goal is missed at the full budget. Where our time goes there (20,480 steps, timers around each
call): ``learn`` 2.86 ms per vector step of 8 copies (78% of the wall time), env stepping ~0.35
ms, acting 0.13 ms, sampling 0.11 ms, adding 0.03 ms. Of one ``learn`` (2.57 ms alone), the
matmuls are ~54% and run at ~140 GFLOP/s (one core's peak here); the rest is ~330 small ops.
Reaching 3x needs ~20% off the whole step, i.e. removing about half of those small ops.

2026-12-04, a slower host (AMD EPYC, a 256x64x64 matmul in 27-31 us, ~8 us per dispatched op
all told), idle, full budget: ours 1,399 vs public 608 steps/s (2.30x; greedy return -19.6 +-
17.7 vs -38.0 +- 38.3). Per vector step (16,384 steps, timers around each call): ``learn``
3.9 ms of 5.1 (77%), env stepping 0.67, acting 0.20, sampling 0.15, adding 0.06. Of one
``learn`` (~274 dispatched ops), the matmuls are ~1.6 ms at this host's speed; the rest is
per-op cost. Tried and dropped: running the policies' updates (independent: no shared
parameters) on two threads. The results were bit-identical to one thread, but the updates
hold the GIL between ops for longer than their kernels release it: one ``learn`` 4.0 ->
3.8-4.6 ms, and the training loop no faster (1,302-1,465 vs 1,346-1,412 steps/s, alternated).
Two torch threads per side do not help ours either (1,405 vs 1,456 steps/s). A second
invocation: 1,379 vs 574 steps/s (2.40x, the same returns); ``--threads 2``: 1,229 vs 490
steps/s (2.51x; greedy return -17.9 vs -39.6: two threads sum in another order).
Also tried and dropped (a prototype, not merged): stepping the 8 copies in one worker process
while ``learn`` runs, whenever the sampled rows miss the 8 being written (results exactly the
sequential ones). The main process's CPU time per vector step did not fall (4.52/4.56 vs
4.14/4.69 ms, alternated, 24,576 steps): sending the actions and unpickling the observations
and infos cost what stepping mpe2 in process costs (~0.4-0.7 ms).

2026-12-04 night, same host, two more tried and dropped:

* The same overlap built properly (not merged): one worker process steps all 8 copies and
  sends back the batched step tuple (60 us to pickle and unpickle), ``step_async`` /
  ``step_wait`` on the vector env, and the loop draws the update's rows as after the add
  and runs the update while the copies step whenever no row is one the add writes (results
  bit-identical to the sequential loop, also with a wrapping buffer). Per vector step,
  57,344 steps, alternated: sending the actions 0.10 ms (62 us alone, 8 of them pickling:
  the pipe write that wakes the sleeping worker; a worker spinning on its pipe instead
  still paid 70-100 us), receiving 0.22 ms on average (14% of updates draw a row being
  written and wait for the whole step), against 0.53-0.63 ms to step in process; the update
  3.61 ms with the worker running vs 3.40 / 3.87 ms without. Wall time per vector step
  4.40 / 4.41 ms vs 4.35 / 5.00 in process: no gain beyond this host's noise. On
  ``simple_tag_v3`` (env step 2.3-2.5 ms) 9.85 / 11.17 vs 11.19 / 10.26 ms: the same.
* ``torch.compile`` (inductor, CPU) of one twin-critic stack's forward, loss and
  backward: 20 s to compile, then 600 vs 654 us per call (8%). The compile alone is half
  of the full MATD3 budget's run here, and each architecture mutation compiles again.

The same evening at 8c05739 (idle, load 0.6), full budget: ours 1,522 vs public 589 steps/s
(2.58x; greedy return -19.6 +- 17.7 vs -38.0 +- 38.3). The 3x goal is still missed.
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
            train_multi_agent_on_policy(
                [agent], env, max_steps=steps, evo_steps=steps, run=RunContext.ephemeral(seed)
            )
        else:
            train_multi_agent_off_policy(
                [agent],
                env,
                max_steps=steps,
                evo_steps=steps,
                memory_size=MEMORY,
                learning_delay=LEARNING_DELAY,
                run=RunContext.ephemeral(seed),
            )
    wall = time.perf_counter() - start
    env.close()
    env_spec = PettingZooEnvSpec(name=ENV, env_config=config)
    returns, _, _ = run_multi_agent_episodes(agent, env_spec, episodes=episodes, seed=seed + 5000)
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
