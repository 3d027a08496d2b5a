"""Evolutionary HPO against Optuna TPE (and the public AgileRL's evolutionary HPO) on one search.

DQN on Acrobot-v1, a search space that is not centred on a tuned preset:

    lr          float 1e-5 .. 1e-2 (log)     batch_size  int 32 .. 256
    learn_step  int 1 .. 8                   gamma       float 0.9 .. 0.999
    width       one of 32, 64, 128, 256 (the encoder's and the head's hidden layer)

Every route gets the same total env-step budget (``--budget``, all members or
trials together) and stops counting at the first greedy evaluation of 10 episodes
>= ``--target`` (-100). Routes:

* ``evo``: ours, one run, ``pop_size`` members whose starting points are drawn
  from the space (:func:`agilerl.hpo.sample_starts`), selection and mutations
  within the same ranges every ``--evo-steps``, shared replay. Selection is the
  default (``tournament_selection.keep_incumbents``): a member keeps its place
  and its training unless a rival drawn from the others is strictly fitter, and
  only the clones that replace losers mutate;
* ``optuna``: ours, an Optuna TPE study (``optuna`` directly; same space), trials
  of ``--trial-steps`` one after another, each stopping at the target; the count is
  every earlier trial's steps plus the solving trial's steps to the target;
* ``public``: the public ``agilerl`` package's ``train_off_policy`` with its
  ``Mutations`` and ``TournamentSelection``, the same starting points, ranges,
  population and budget, in its own virtualenv (``.bench_venvs/agilerl_public``).
  Its own stop rule wants every member's 10-evaluation mean above the target; it
  is replaced by ours (the first evaluation of any member), so the counts compare.

How the count is kept the same for every route: each counts the training env
steps of all its members or trials together (evaluation episodes are not counted
for any route) up to the first evaluation that reaches the target; every member
or trial is evaluated after each ``--evo-steps`` of its own steps, so each route
gets the same number of evaluations per env step. Nothing is pruned: an Optuna
trial runs its ``--trial-steps`` unless it solves, an evolutionary member runs
until the budget unless selection replaces it.

Each (route, seed) runs in its own process (``--jobs`` at a time); results are
appended to ``--out`` as JSON lines while the benchmark runs. Prints the median
env steps and wall seconds to the target per route (an unsolved seed counts as
the whole budget and is marked) and the ratios.

    python scripts/bench/evo_vs_optuna.py [--seeds 0 1 2] [--budget 100000] [--jobs 2]

Results: benchmarks/evo_vs_optuna.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(Path(__file__).resolve().parent)]  # this checkout's agilerl

ENV = "Acrobot-v1"
RANGES = {  # (min, max, grow, shrink): the mutation ranges and the space both routes search
    "lr": (1e-5, 1e-2, 1.2, 0.8),
    "batch_size": (32, 256, 1.2, 0.8),
    "learn_step": (1, 8, 1.2, 0.8),
    "gamma": (0.9, 0.999, 1.2, 0.8),
}
WIDTHS = (32, 64, 128, 256)
TRAINING = {
    "eval_loop": 10,
    "learning_delay": 1000,
    "eps_start": 1.0,
    "eps_end": 0.05,
    "eps_decay": 0.9995,
}
MUTATION_P = {  # the defaults of conf/hpo/evolutionary.yaml, used by both evolutionary routes
    "no_mut": 0.4,
    "arch_mut": 0.2,
    "new_layer": 0.2,
    "params_mut": 0.2,
    "act_mut": 0.0,
    "rl_hp_mut": 0.2,
}
NET = {"latent_dim": 64, "min_latent_dim": 8, "max_latent_dim": 256, "min_mlp": 16, "max_mlp": 512}
BUFFER = 50_000
PEER_PACKAGES = ["agilerl", "torch==2.13.0", "peft"]  # import agilerl.algorithms needs peft


# --- the shared search space ----------------------------------------------------------------
def sample_starts(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` starting points (hyperparameters and width) drawn from the space."""
    import numpy as np

    from agilerl.hpo import sample_starts as draw

    rng = np.random.default_rng(10_000 + seed)
    starts = draw(RANGES, count, rng)
    for start in starts:
        start["width"] = int(WIDTHS[int(rng.integers(len(WIDTHS)))])
    return starts


def network_section(width: int) -> dict[str, Any]:
    mlp = {"min_mlp_nodes": NET["min_mlp"], "max_mlp_nodes": NET["max_mlp"]}
    return {
        "latent_dim": NET["latent_dim"],
        "min_latent_dim": NET["min_latent_dim"],
        "max_latent_dim": NET["max_latent_dim"],
        "encoder_config": {"arch": "mlp", "hidden_size": [width], **mlp},
        "head_config": {"hidden_size": [width], **mlp},
    }


# --- ours -------------------------------------------------------------------------------------
class _StartsFromSpace:
    """A strategy that builds the population, then rebuilds each member from its start."""

    def __init__(self, inner: Any, starts: list[dict[str, Any]], seed: int) -> None:
        self.inner, self.starts, self.seed = inner, starts, seed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def build_population(self, *args: Any, **kwargs: Any) -> list[Any]:
        from agilerl.hpo import start_population

        population = self.inner.build_population(*args, **kwargs)
        starts = []
        for start in self.starts:
            width = start["width"]
            hps = {k: v for k, v in start.items() if k != "width"}
            net = {
                "encoder_config": {"hidden_size": [width]},
                "head_config": {"hidden_size": [width]},
            }
            starts.append({**hps, "net_config": net})
        return start_population(population, starts, seed=self.seed)


def _trainer(
    workdir: Path,
    name: str,
    start: dict[str, Any],
    training: dict[str, Any],
    seed: int,
    **sections: Any,
) -> Any:
    from agilerl.trainer import LocalTrainer

    hps = {k: v for k, v in start.items() if k != "width"}
    return LocalTrainer(
        {"name": "DQN", **hps, "tau": 0.005, "double": True},
        {"env_type": "gym", "name": ENV, "num_envs": 1},
        {**TRAINING, **training},
        network=network_section(int(start["width"])),
        replay_buffer={"max_size": BUFFER},
        seed=seed,
        run_dir=workdir / name,
        logger={"tensorboard": False},
        verbose=False,
        presets=False,  # the benchmark states every setting; no tuned preset underneath
        **sections,
    )


def run_evo(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    starts = sample_starts(args.pop, args.seed)
    trainer = _trainer(
        workdir,
        "evo",
        starts[0],
        {
            "pop_size": args.pop,
            "hpo": True,
            "max_steps": args.budget // args.pop,
            "evo_steps": args.evo_steps,
            "target_score": args.target,
            "overwrite_checkpoints": True,
        },
        args.seed,
        mutation={
            "probabilities": MUTATION_P,
            "rl_hp_selection": {
                k: {"min": lo, "max": hi, "grow_factor": g, "shrink_factor": s}
                for k, (lo, hi, g, s) in RANGES.items()
            },
            "rand_seed": args.seed,
        },
        tournament_selection={"tournament_size": 2, "elitism": True},
    )
    trainer.strategy = _StartsFromSpace(trainer.strategy, starts, args.seed)
    start = time.perf_counter()
    result = trainer.run()
    wall = time.perf_counter() - start
    return {
        "env_steps": result.solved_at_step,
        "wall": wall,
        "steps_run": result.total_steps,
        "best": result.best_fitness,
        "starts": starts,
    }


def run_optuna(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=args.startup_trials)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    steps_before, wall_before, trials = 0, 0.0, []
    n_trials = max(1, args.budget // args.trial_steps)
    for number in range(n_trials):
        trial = study.ask()
        lo, hi = RANGES["lr"][:2]
        start = {
            "lr": trial.suggest_float("lr", lo, hi, log=True),
            "batch_size": trial.suggest_int("batch_size", 32, 256),
            "learn_step": trial.suggest_int("learn_step", 1, 8),
            "gamma": trial.suggest_float("gamma", 0.9, 0.999),
            "width": trial.suggest_categorical("width", list(WIDTHS)),
        }
        trainer = _trainer(
            workdir,
            f"trial_{number}",
            start,
            {
                "pop_size": 1,
                "hpo": False,
                "max_steps": args.trial_steps,
                "evo_steps": args.evo_steps,
                "target_score": args.target,
                "overwrite_checkpoints": True,
            },
            args.seed * 100 + number,
        )
        began = time.perf_counter()
        result = trainer.run()
        wall = time.perf_counter() - began
        best = result.best_fitness if result.best_fitness is not None else -500.0
        study.tell(trial, best)
        trials.append({**start, "best": best, "steps": result.total_steps})
        if result.solved_at_step is not None:
            return {
                "env_steps": steps_before + result.solved_at_step,
                "wall": wall_before + wall,
                "steps_run": steps_before + result.total_steps,
                "trials": trials,
            }
        steps_before += result.total_steps
        wall_before += wall
    return {"env_steps": None, "wall": wall_before, "steps_run": steps_before, "trials": trials}


def run_public(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from peer_venv import VENVS, ensure_venv

    python = ensure_venv(VENVS / "agilerl_public", PEER_PACKAGES)
    job = {
        "env": ENV,
        "seed": args.seed,
        "pop": args.pop,
        "budget": args.budget,
        "evo_steps": args.evo_steps,
        "target": args.target,
        "starts": sample_starts(args.pop, args.seed),
        "ranges": RANGES,
        "training": TRAINING,
        "mutation": MUTATION_P,
        "net": NET,
        "buffer": BUFFER,
    }
    job_file = workdir / "public_job.json"
    job_file.write_text(json.dumps(job))
    peer = Path(__file__).resolve().parent / "_agilerl_public_evo.py"
    # cwd outside the repo and no PYTHONPATH: `import agilerl` must find the public package
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), str(peer), str(job_file)],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


ROUTES = {"evo": run_evo, "optuna": run_optuna, "public": run_public}


# --- orchestration ----------------------------------------------------------------------------
def _one(route: str, seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--one",
        route,
        "--seeds",
        str(seed),
        *[f"--{k.replace('_', '-')}={getattr(args, k)}" for k in _SHARED],
    ]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        record = {"route": route, "seed": seed, "error": done.stderr[-2000:]}
    else:
        record = json.loads(done.stdout.strip().splitlines()[-1])
    record.update(route=route, seed=seed, process_wall=round(time.perf_counter() - began, 1))
    with out.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    print(
        f"  {route} seed {seed}: env steps {record.get('env_steps')}  "
        f"wall {record.get('wall', float('nan')):.0f} s",
        flush=True,
    )
    return record


_SHARED = ("budget", "pop", "evo_steps", "trial_steps", "startup_trials", "target")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def report(records: list[dict[str, Any]], budget: int) -> None:
    print(f"\n{'route':8} {'solved':>7} {'median env steps':>17} {'median wall s':>14}  per seed")
    medians: dict[str, tuple[float, float]] = {}
    for route in ROUTES:
        rows = [r for r in records if r["route"] == route and "error" not in r]
        if not rows:
            continue
        steps = [r["env_steps"] if r["env_steps"] is not None else budget for r in rows]
        walls = [r["wall"] for r in rows]
        solved = sum(r["env_steps"] is not None for r in rows)
        medians[route] = (_median(steps), _median(walls))
        detail = ", ".join(
            f"{r['env_steps'] if r['env_steps'] is not None else f'>{budget}'}/{r['wall']:.0f}s"
            for r in sorted(rows, key=lambda r: r["seed"])
        )
        print(
            f"{route:8} {solved:>3}/{len(rows):<3} {medians[route][0]:>17,.0f} "
            f"{medians[route][1]:>14.0f}  {detail}"
        )
    for route in ROUTES:
        for r in records:
            if r["route"] == route and "error" in r:
                print(f"{route} seed {r['seed']} failed: {r['error'].splitlines()[-1:]}")
    if "evo" in medians:
        for other in ("optuna", "public"):
            if other in medians:
                (s_evo, w_evo), (s_other, w_other) = medians["evo"], medians[other]
                print(
                    f"{other}/evo: env steps {s_other / s_evo:.2f}x, wall {w_other / w_evo:.2f}x"
                    "  (unsolved seeds count as the whole budget: a lower bound)"
                )
    print("goals: optuna/evo env steps >= 3x; public/evo env steps and wall > 1x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=100_000, help="env steps per route")
    parser.add_argument("--pop", type=int, default=4)
    parser.add_argument("--evo-steps", type=int, default=2_500)
    parser.add_argument("--trial-steps", type=int, default=25_000)
    parser.add_argument("--startup-trials", type=int, default=2, help="TPE's random trials")
    parser.add_argument("--target", type=float, default=-100.0)
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    parser.add_argument("--jobs", type=int, default=2, help="(route, seed) processes at a time")
    parser.add_argument("--out", type=Path, default=None, help="JSON-lines results file")
    parser.add_argument("--one", choices=list(ROUTES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        import torch

        torch.set_num_threads(1)
        args.seed = args.seeds[0]
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(ROUTES[args.one](args, Path(tmp)), default=float))
        return
    out = args.out or Path(tempfile.mkdtemp()) / "evo_vs_optuna.jsonl"
    print(
        f"DQN {ENV}, budget {args.budget:,} env steps per route, target {args.target}, "
        f"pop {args.pop}, evo_steps {args.evo_steps}, trials of {args.trial_steps:,}; "
        f"results: {out}",
        flush=True,
    )
    if "public" in args.routes:
        from peer_venv import VENVS, ensure_venv

        ensure_venv(VENVS / "agilerl_public", PEER_PACKAGES)
    slowest_first = [r for r in ("public", "optuna", "evo") if r in args.routes]
    tasks = [(route, seed) for route in slowest_first for seed in args.seeds]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        records = list(pool.map(lambda task: _one(*task, args, out), tasks))
    report(records, args.budget)


if __name__ == "__main__":
    main()
