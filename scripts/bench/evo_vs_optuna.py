"""Evolutionary HPO (one run, a population of 4) against an Optuna study of single runs.

Both search the same space for DQN on CartPole-v1 (lr, batch_size, learn_step) and
stop counting at the first greedy evaluation >= 475 (10 episodes):

(a) one run, ``hpo=evolutionary training.pop_size=4``, evolution every ``--evo-steps``;
(b) a Hydra multirun with ``hydra/sweeper=optuna`` (TPE), trials of fixed length
    (``--trial-steps``) run one after another; the count is the env steps of every
    trial before the solving one plus the solving trial's steps at its first 475.

Prints total env steps and wall seconds to the first 475 for each route, and the ratio.

    python scripts/bench/evo_vs_optuna.py [--trials 12] [--trial-steps 50000]
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LR = (1e-4, 1e-2)  # the search space both routes share: lr, batch_size in [32, 256], learn_step
STEP = (1, 8)


def _train(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(REPO / "train.py"), *args, "logger.tensorboard=false"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)


def evolutionary(workdir: Path, evo_steps: int, max_steps: int, seed: int) -> dict:
    run_dir = workdir / "evo"
    start = time.perf_counter()
    done = _train(
        "algorithm=dqn",
        "env=cartpole",
        "hpo=evolutionary",
        "training.pop_size=4",
        f"training.evo_steps={evo_steps}",
        f"training.max_steps={max_steps}",
        f"seed={seed}",
        f"run_dir={run_dir}",
        f"+mutation.rl_hp_selection.lr={{min: {LR[0]}, max: {LR[1]}}}",
        "+mutation.rl_hp_selection.batch_size={min: 32, max: 256}",
        f"+mutation.rl_hp_selection.learn_step={{min: {STEP[0]}, max: {STEP[1]}}}",
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    summary = json.loads((run_dir / "summary.json").read_text())
    generations = (
        len({r["generation"] for r in csv.DictReader((run_dir / "hpo.csv").open())})
        if (run_dir / "hpo.csv").exists()
        else 0
    )
    return {
        "env_steps": summary["solved_at_step"],
        "wall": summary["wall_seconds"],
        "process_wall": wall,
        "generations": generations,
    }


def optuna_route(workdir: Path, trials: int, trial_steps: int, seed: int) -> dict:
    sweep = workdir / "optuna"
    start = time.perf_counter()
    done = _train(
        "-m",
        "hydra/sweeper=optuna",
        f"hydra.sweep.dir={sweep}",
        "algorithm=dqn",
        "env=cartpole",
        f"hydra.sweeper.n_trials={trials}",
        "hydra.sweeper.n_jobs=1",
        f"hydra.sweeper.seed={seed}",
        "training.target_score=null",
        f"training.max_steps={trial_steps}",
        f"seed={seed}",
        f"hydra.sweeper.search_space.algorithm.lr.low={LR[0]}",
        f"hydra.sweeper.search_space.algorithm.lr.high={LR[1]}",
        f"hydra.sweeper.search_space.algorithm.learn_step.low={STEP[0]}",
        f"hydra.sweeper.search_space.algorithm.learn_step.high={STEP[1]}",
    )
    total_wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    events = [json.loads(line) for line in (sweep / "ledger.jsonl").read_text().splitlines()]
    order = []
    for event in events:
        if event["state"] == "completed" and event["key"] not in [k for k, _ in order]:
            order.append((event["key"], event["run_dir"]))
    steps_before, wall_before = 0, 0.0
    for _key, run_dir in order:
        rows = list(csv.DictReader((Path(run_dir) / "metrics.csv").open()))
        hit = next((r for r in rows if float(r["fitness"]) >= 475), None)
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        if hit is not None:
            return {
                "env_steps": steps_before + int(hit["step"]),
                "wall": wall_before + float(hit["wall_seconds"]),
                "trials_run": len(order),
                "sweep_wall": total_wall,
            }
        steps_before += summary["total_steps"]
        wall_before += summary["wall_seconds"]
    return {
        "env_steps": None,
        "wall": None,
        "trials_run": len(order),
        "sweep_wall": total_wall,
        "steps_without_solving": steps_before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--trial-steps", type=int, default=50_000)
    parser.add_argument("--evo-steps", type=int, default=5_000)
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        evo = evolutionary(Path(tmp), args.evo_steps, args.max_steps, args.seed)
        study = optuna_route(Path(tmp), args.trials, args.trial_steps, args.seed)
    print(f"evolutionary (pop 4): env steps to 475: {evo['env_steps']}  wall s: {evo['wall']}")
    print(
        f"optuna ({study['trials_run']} trials x {args.trial_steps}): env steps to 475: "
        f"{study['env_steps']}  wall s: {study['wall']}"
    )
    if study["env_steps"] is None:
        spent = study.get("steps_without_solving", 0)
        print(
            f"optuna did not reach 475 in {study['trials_run']} trials ({spent} env steps): "
            f"at least {spent / evo['env_steps']:.1f}x the evolutionary run's env steps"
        )
    if evo["env_steps"] and study["env_steps"]:
        print(
            f"ratio optuna/evolutionary: env steps {study['env_steps'] / evo['env_steps']:.1f}x, "
            f"wall {study['wall'] / evo['wall']:.1f}x (goal >= 5x fewer env steps)"
        )


if __name__ == "__main__":
    main()
