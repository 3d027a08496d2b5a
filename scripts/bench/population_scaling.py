"""Env steps/s of a population of 1, 4 and 8, batched vs sequential, for DQN and PPO on CartPole.

Each run goes through the real trainer (``LocalTrainer`` from the composed
``algorithm=<dqn|ppo> env=cartpole`` configs, tuned presets included), with
``training.batched_population`` true or false, a fixed budget of env steps per
member, no target score (so every run takes the whole budget) and the
presets' evaluation schedule (evaluation time counted). Pop 1 is one agent.
Runs of a population size alternate batched/sequential so machine-load
drift affects both alike; with ``--repeats`` every configuration keeps its
fastest round (the least disturbed by other load). One torch thread.

Prints a table and the ratios batched / sequential, and the wall time of a
batched generation relative to one agent's (pop N batched vs pop 1).
PPO's batched and sequential runs learn the same (the same ``best`` fitness
is printed for both; so does DQN's with one memory per member).

    python scripts/bench/population_scaling.py [--algos dqn ppo] [--pops 1 4 8] \\
        [--steps 4000] [--repeats 3] [--env cartpole]

Results: benchmarks/population_scaling.md
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
BATCHED = frozenset({"dqn", "ppo"})
"""Algorithms whose populations train batched (the others fall back to sequential)."""
sys.path.insert(0, str(REPO))  # this checkout's agilerl, even beside an installed one


def _manifest(*overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from agilerl.launch.compose import build_manifest
    from agilerl.launch.overrides import normalise_overrides

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        args = normalise_overrides(list(overrides), REPO / "conf")
        return build_manifest(compose(config_name="config", overrides=args))[0]


def run(
    algo: str, pop: int, batched: bool, steps: int, workdir: Path, seed: int, env: str = "cartpole"
) -> dict:
    """One training run; env steps/s of the run (evaluation included)."""
    from agilerl.trainer import LocalTrainer

    evo = max(1, steps // 2)
    manifest = _manifest(
        f"algorithm={algo}",
        f"env={env}",
        f"training.pop_size={pop}",
        f"training.max_steps={steps}",
        f"training.evo_steps={evo}",
        "training.target_score=null",
        f"training.batched_population={str(batched).lower()}",
    )
    run_dir = workdir / f"{algo}_{pop}_{'b' if batched else 's'}"
    trainer = LocalTrainer.from_manifest(
        manifest, seed=seed, run_dir=run_dir, verbose=False, logger={"tensorboard": False}
    )
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "steps": summary["total_steps"],
        "wall": wall,
        # The run's own measure (summary.json): training and evaluation, not process start-up
        # or the final plots; the total wall time of the call is printed beside it.
        "steps_per_second": summary["steps_per_second"],
        "best_fitness": summary["best_fitness"],
    }


def main() -> None:
    """Run the grid and print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["dqn", "ppo"])
    parser.add_argument("--pops", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--steps", type=int, default=4000, help="env steps per member")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--env", default="cartpole", help="conf/env choice (e.g. pendulum for Gaussian PPO)"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds; each configuration keeps its fastest run"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[tuple[str, int, bool], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeats):
            for algo in args.algos:
                for pop in args.pops:
                    order = (True, False) if (pop + round_) % 2 else (False, True)
                    for batched in order:
                        where = Path(tmp) / str(round_)
                        out = run(algo, pop, batched, args.steps, where, args.seed, args.env)
                        best = results.get((algo, pop, batched))
                        if best is None or out["steps_per_second"] > best["steps_per_second"]:
                            results[algo, pop, batched] = out
                        kind = "batched" if batched else "sequential"
                        if batched and algo not in BATCHED:
                            kind = "fallback"
                        print(
                            f"{algo:4s} pop {pop:2d} {kind:10s} {out['steps']:7d} steps "
                            f"{out['wall']:7.1f} s wall {out['steps_per_second']:8.0f} steps/s "
                            f"best {out['best_fitness']}",
                            flush=True,
                        )
    print("\nalgo pop  batched/s  sequential/s  batched÷sequential  wall/gen vs pop-1 sequential")
    for algo in args.algos:
        one = results.get((algo, 1, False))
        for pop in args.pops:
            b, s = results[algo, pop, True], results[algo, pop, False]
            ratio = b["steps_per_second"] / s["steps_per_second"]
            vs_one = ""
            if one is not None:
                # Wall time per generation of the population, relative to one agent's.
                vs_one = f"{pop * one['steps_per_second'] / b['steps_per_second']:.2f}x"
            print(
                f"{algo:4s} {pop:3d} {b['steps_per_second']:10.0f} {s['steps_per_second']:13.0f} "
                f"{ratio:19.2f}x  {vs_one:>10s}"
            )


if __name__ == "__main__":
    main()
