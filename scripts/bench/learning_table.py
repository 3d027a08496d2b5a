"""Learning results per paradigm, over seeds, with the statistics researchers publish.

Each row trains one preset (``python train.py ...``) once per seed and reports, over the
seeds, the interquartile mean of the final evaluation with its stratified bootstrap 95%
interval (``agilerl.logging.rl_stats``: rliable's method and defaults), the median, how
many seeds reached the target, and the env steps and wall seconds to the target (IQM and
interval over the seeds that reached it). A run that stops at its target reports that
evaluation as its final one. ``baseline`` is the same metric for a policy that does not
learn, measured here: a uniformly random policy for gym and PettingZoo envs, the dataset's
behaviour policy for offline data, uniform pulls for bandits, the untrained model
(``lr=0``) for LLMs. ``peer`` quotes a published figure with its source, where one exists
for the same task.

Writes ``benchmarks/<table>.md`` and ``benchmarks/<table>.csv`` (one table per paradigm)
with the command, the commit and the machine, and keeps each run directory under
``--runs`` (default ``<out>/runs``; ``benchmarks/runs`` is not committed). A seed whose run
directory holds a ``summary.json`` is not run again::

    python scripts/bench/learning_table.py                       # every row, seeds 0-4
    python scripts/bench/learning_table.py --rows ppo_cartpole --seeds 0 1 2 --out my_tables
    python scripts/bench/learning_table.py --list

``tests/test_benchmarks.py`` (slow) re-runs the PPO CartPole row and checks that its IQM
lies inside the committed interval.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from agilerl.logging.rl_stats import bootstrap_interval  # noqa: E402

RL_ZOO = "rl-zoo3"
SOURCES = {
    RL_ZOO: "rl-baselines3-zoo `benchmark.md` (DLR-RM/rl-baselines3-zoo, commit 0088472): "
    "mean ± std of the deterministic policy over its evaluation episodes, one training run "
    'each ("not a quantitative benchmark", in its own words)',
}


@dataclass(frozen=True)
class Row:
    """One algorithm on one task: what to run and how to read it."""

    key: str
    table: str
    overrides: tuple[str, ...]
    metric: str
    target: float | None = None
    column: str = "fitness"
    """The ``metrics.csv`` column scored (the population's best of each evaluation)."""
    higher_is_better: bool = True
    baseline: tuple[str, ...] = ()
    """How to measure a policy that does not learn: ``("random", env id)``,
    ``("pettingzoo_random", module, env_config JSON)``, ``("dataset", path)``,
    ``("uniform_pulls", classes)`` or ``("untrained",)``."""
    peer: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    """(metrics.csv column, label): final values also reported (mean over seeds)."""
    setup: tuple[tuple[str, ...], ...] = ()


MPE_SL = ("pettingzoo_random", "mpe2.simple_speaker_listener_v4",
          '{"continuous_actions": false, "max_cycles": 25}')  # fmt: skip
ROWS: tuple[Row, ...] = (
    Row("ppo_cartpole", "single_agent", ("algorithm=ppo", "env=cartpole"), "return", 475,
        baseline=("random", "CartPole-v1"),
        peer=f"SB3 PPO 500.0 ± 0.0 after 100k steps [{RL_ZOO}]"),
    Row("dqn_cartpole", "single_agent", ("algorithm=dqn", "env=cartpole"), "return", 475,
        baseline=("random", "CartPole-v1"),
        peer=f"SB3 DQN 500.0 ± 0.0 after 50k steps [{RL_ZOO}]"),
    Row("rainbow_dqn_cartpole", "single_agent", ("algorithm=rainbow_dqn", "env=cartpole"),
        "return", 475, baseline=("random", "CartPole-v1"),
        peer=f"SB3 QR-DQN 500.0 ± 0.0 after 50k steps [{RL_ZOO}]"),
    Row("recurrent_ppo_cartpole_novel", "single_agent",
        ("algorithm=recurrent_ppo", "env=cartpole_novel"), "return", 475,
        baseline=("random", "CartPoleNoVel-v1")),
    Row("ddpg_pendulum", "single_agent", ("algorithm=ddpg", "env=pendulum"), "return", -200,
        baseline=("random", "Pendulum-v1"),
        peer=f"SB3 DDPG -152.1 ± 94.3 after 20k steps [{RL_ZOO}]"),
    Row("td3_pendulum", "single_agent", ("algorithm=td3", "env=pendulum"), "return", -200,
        baseline=("random", "Pendulum-v1"),
        peer=f"SB3 TD3 -151.9 ± 90.2 after 20k steps [{RL_ZOO}]"),
    Row("sac_pendulum", "single_agent", ("algorithm=sac", "env=pendulum"), "return", -200,
        baseline=("random", "Pendulum-v1"),
        peer=f"SB3 SAC -157.0 ± 88.7 after 20k steps [{RL_ZOO}]"),
    Row("ppo_minatar_breakout", "single_agent", ("algorithm=ppo", "env=minatar_breakout"),
        "points a game", 4.0, baseline=("random", "MinAtar/Breakout-v1")),
    Row("dqn_minatar_breakout", "single_agent",
        ("algorithm=dqn", "env=minatar_breakout", "training.max_steps=50000"),
        "points a game", 4.0, baseline=("random", "MinAtar/Breakout-v1")),
    Row("ippo_speaker_listener", "multi_agent", ("experiment=ippo_speaker_listener",),
        "return summed over agents", -30, baseline=MPE_SL),
    Row("matd3_speaker_listener", "multi_agent", ("experiment=matd3_speaker_listener",),
        "return summed over agents", -30, baseline=MPE_SL),
    Row("cqn_cartpole_offline", "offline",
        ("algorithm=cqn", "env=cartpole_offline"),
        "return (live env)", 475, baseline=("dataset", "data/cartpole_replay.npz"),
        setup=(("scripts/make_offline_dataset.py",),)),
    Row("neural_ucb_iris", "bandits",
        ("algorithm=neural_ucb", "env=iris_bandit"),
        "greedy accuracy", 0.95, baseline=("uniform_pulls", "3"),
        extra=(("cumulative_regret", "regret at the end"),)),
    Row("grpo_digits", "llm", ("experiment=grpo_digits",),
        "sampled reward (T=1) of the round", 0.8, column="train_reward",
        baseline=("untrained",), extra=(("fitness", "held-out greedy reward"),)),
    Row("sft_chat", "llm", ("experiment=sft_chat",), "held-out loss", None, column="loss",
        higher_is_better=False, baseline=("untrained",)),
    Row("dpo_preference", "llm", ("experiment=dpo_preference",),
        "held-out reward accuracy", None, column="reward_accuracy", baseline=("untrained",),
        extra=(("loss", "held-out loss"),)),
)  # fmt: skip

TABLE_TITLES = {
    "single_agent": "Single-agent RL (gymnasium)",
    "multi_agent": "Multi-agent RL (PettingZoo MPE)",
    "offline": "Offline RL",
    "bandits": "Contextual bandits",
    "llm": "LLM fine-tuning (tiny local model)",
}
COLUMNS = [
    "row", "algorithm", "preset", "metric", "seeds", "n",
    "iqm", "iqm_low", "iqm_high", "median", "median_low", "median_high", "baseline",
    "target", "reached", "steps_to_target_iqm", "steps_to_target_low", "steps_to_target_high",
    "wall_to_target_iqm", "wall_to_target_low", "wall_to_target_high", "extra", "peer",
    "command", "commit", "date", "machine",
]  # fmt: skip


def command(row: Row, seeds: str) -> str:
    """The exact command; ``seeds`` is one seed or ``{0,1,...}``."""
    return " ".join(["python", "train.py", *row.overrides, f"seed={seeds}"])


def run_seed(row: Row, seed: int, runs: Path, python: str, extra: Sequence[str] = ()) -> Path:
    """Train one seed into ``runs/<row>/seed_<n>`` (reused when its summary exists)."""
    run_dir = runs / row.key / f"seed_{seed}"
    if (run_dir / "summary.json").is_file():
        return run_dir
    args = [python, "train.py", *row.overrides, *extra, f"seed={seed}", f"run_dir={run_dir}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not (run_dir / "summary.json").is_file():
        tail = (done.stdout + done.stderr)[-2000:]
        raise RuntimeError(f"{row.key} seed {seed} failed ({done.returncode}):\n{tail}")
    return run_dir


@dataclass
class SeedResult:
    """What one seed's run directory says."""

    final: float
    reached_at: float | None
    wall_at: float | None
    extra: dict[str, float]


def read_run(row: Row, run_dir: Path) -> SeedResult:
    """The final value of ``row.column`` and the first evaluation at the target."""
    by_step: dict[int, list[dict[str, str]]] = {}
    with (run_dir / "metrics.csv").open() as handle:
        for record in csv.DictReader(handle):
            if record.get(row.column, "") != "":
                by_step.setdefault(int(float(record["step"])), []).append(record)
    if not by_step:
        raise RuntimeError(f"{run_dir / 'metrics.csv'} has no {row.column} values")
    pick = max if row.higher_is_better else min
    reached_at = wall_at = None
    steps = sorted(by_step)
    for step in steps if row.target is not None else ():
        best = pick(float(r[row.column]) for r in by_step[step])
        if (best >= row.target) if row.higher_is_better else (best <= row.target):
            reached_at, wall_at = step, float(by_step[step][0]["wall_seconds"])
            break
    last = by_step[steps[-1]]
    final = pick(float(r[row.column]) for r in last)
    extra = {col: float(last[0][col]) for col, _ in row.extra if last[0].get(col, "") != ""}
    return SeedResult(final, reached_at, wall_at, extra)


RANDOM_GYM = """
import sys, gymnasium as gym, numpy as np
import agilerl.envs.cartpole_novel as novel
from agilerl.envs.images import register_family
novel.register()
register_family(sys.argv[1])
env, returns = gym.make(sys.argv[1]), []
for seed in range(int(sys.argv[2])):
    env.reset(seed=seed); env.action_space.seed(seed); total, done = 0.0, False
    while not done:
        _, reward, term, trunc, _ = env.step(env.action_space.sample()); total += reward
        done = term or trunc
    returns.append(total)
print(np.mean(returns))
"""
RANDOM_PETTINGZOO = """
import importlib, json, sys, numpy as np
env = importlib.import_module(sys.argv[1]).parallel_env(**json.loads(sys.argv[3]))
returns = []
for seed in range(int(sys.argv[2])):
    obs, _ = env.reset(seed=seed); total = 0.0
    for i, agent in enumerate(env.agents):
        env.action_space(agent).seed(seed * 100 + i)
    while env.agents:
        acts = {a: env.action_space(a).sample() for a in env.agents}
        obs, rewards, *_ = env.step(acts); total += sum(rewards.values())
    returns.append(total)
print(np.mean(returns))
"""


def baseline(row: Row, runs: Path, python: str) -> float | None:
    """The row's metric for a policy that does not learn (see ``Row.baseline``)."""
    if not row.baseline:
        return None
    kind, *args = row.baseline
    if kind == "untrained":  # the run's own first evaluation with a frozen model
        frozen = Row(f"{row.key}_untrained", row.table, row.overrides, row.metric,
                     column=row.column, higher_is_better=row.higher_is_better)  # fmt: skip
        budget = ("algorithm.lr=0", "training.max_steps=10")
        return read_run(frozen, run_seed(frozen, 0, runs, python, budget)).final
    if kind == "uniform_pulls":
        return 1.0 / float(args[0])
    if kind == "dataset":  # the behaviour policy's mean episode return
        data = np.load(REPO / args[0])
        ends = np.flatnonzero(data["episode_terminals"])
        sums = np.add.reduceat(data["rewards"], np.r_[0, ends[:-1] + 1])
        return float(sums[: len(ends)].mean())
    code = {"random": RANDOM_GYM, "pettingzoo_random": RANDOM_PETTINGZOO}[kind]
    out = subprocess.run([python, "-c", code, args[0], "20", *args[1:]], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return float(out.strip().splitlines()[-1])


def summarise(row: Row, results: list[SeedResult], seeds: Sequence[int]) -> dict[str, Any]:
    """One table line: every statistic of a row, flat (as the CSV holds it)."""
    final_iqm = bootstrap_interval([r.final for r in results], "iqm")
    final_median = bootstrap_interval([r.final for r in results], "median")
    reached = [r for r in results if r.reached_at is not None]
    steps = bootstrap_interval([r.reached_at for r in reached], "iqm") if reached else None
    wall = bootstrap_interval([r.wall_at for r in reached], "iqm") if reached else None
    extra = []
    for col, label in row.extra:
        values = [r.extra[col] for r in results if col in r.extra]
        if values:
            extra.append(f"{label} {float(np.mean(values)):.3g}")
    return {
        "row": row.key,
        "algorithm": row.overrides[0].split("=", 1)[1],
        "preset": " ".join(row.overrides),
        "metric": row.metric,
        "seeds": " ".join(str(s) for s in seeds),
        "n": len(results),
        "iqm": final_iqm.value, "iqm_low": final_iqm.low, "iqm_high": final_iqm.high,
        "median": final_median.value, "median_low": final_median.low,
        "median_high": final_median.high,
        "target": row.target,
        "reached": len(reached),
        "steps_to_target_iqm": steps and steps.value,
        "steps_to_target_low": steps and steps.low,
        "steps_to_target_high": steps and steps.high,
        "wall_to_target_iqm": wall and wall.value,
        "wall_to_target_low": wall and wall.low,
        "wall_to_target_high": wall and wall.high,
        "extra": "; ".join(extra),
        "peer": row.peer,
        "command": command(row, "{" + ",".join(str(s) for s in seeds) + "}"),
    }  # fmt: skip


def fmt(value: Any, spec: str = ".3g") -> str:
    """A number for the table (``-`` for none or NaN)."""
    if value in (None, ""):
        return "-"
    value = float(value)
    return "-" if math.isnan(value) else format(value, spec)


def interval(line: dict[str, Any], prefix: str, spec: str = ".3g") -> str:
    """``value [low, high]`` from a line's ``<prefix>``, ``_low`` and ``_high`` columns."""
    base = prefix.removesuffix("_iqm")
    value, low, high = (line.get(k) for k in (prefix, f"{base}_low", f"{base}_high"))
    if fmt(value) == "-":
        return "-"
    if fmt(low) == "-":
        return fmt(value, spec)
    return f"{fmt(value, spec)} [{fmt(low, spec)}, {fmt(high, spec)}]"


def machine() -> str:
    """CPU model and core count, as the tables state them."""
    model = platform.processor() or platform.machine()
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                model = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def commit() -> str:
    """The checkout's commit (``+dirty`` when tracked files have uncommitted changes)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout

    return git("rev-parse", "--short", "HEAD").strip() + (
        "+dirty" if git("status", "--porcelain", "--untracked-files=no").strip() else ""
    )


def read_table(path: Path) -> list[dict[str, Any]]:
    """A committed table's lines (empty when there is none)."""
    if not path.is_file():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def write_table(name: str, lines: list[dict[str, Any]], out: Path) -> Path:
    """``<name>.csv`` and ``<name>.md`` under ``out``; returns the markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{name}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for line in lines:
            writer.writerow({k: "" if line.get(k) is None else line[k] for k in COLUMNS})
    md = [
        f"# {TABLE_TITLES[name]}",
        "",
        "Regenerated by `python scripts/bench/learning_table.py` (its docstring says how each "
        "column is measured). IQM and median over seeds of each run's final evaluation with "
        "95% stratified bootstrap intervals (rliable's method, 50,000 resamples); steps and "
        "wall seconds to the target are over the seeds that reached it; one torch thread a "
        "run, two runs at a time.",
        "",
        "| run | metric | seeds | IQM final [95% CI] | median [95% CI] | baseline | "
        "target: reached | env steps to target, IQM [CI] | wall s to target, IQM [CI] | peer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for line in lines:
        target = (
            "-"
            if fmt(line["target"]) == "-"
            else (f"{fmt(line['target'])}: {line['reached']}/{line['n']}")
        )
        md.append(
            f"| {line['row']} | {line['metric']} | {line['n']} | {interval(line, 'iqm')} | "
            f"{interval(line, 'median')} | {fmt(line['baseline'])} | {target} | "
            f"{interval(line, 'steps_to_target_iqm', '.0f')} | "
            f"{interval(line, 'wall_to_target_iqm', '.1f')} | {line['peer'] or '-'} |"
        )
    cited = [key for key in SOURCES if any(f"[{key}]" in (x["peer"] or "") for x in lines)]
    if cited:
        md += ["", "Peers:", "", *(f"- [{key}] {SOURCES[key]}" for key in cited)]
    extras = [f"- {line['row']}: {line['extra']}" for line in lines if line.get("extra")]
    if extras:
        md += ["", "Also measured (mean over seeds of each run's final value):", "", *extras]
    md += ["", "| run | commit | date | machine |", "|---|---|---|---|"]
    md += [f"| {x['row']} | {x['commit']} | {x['date']} | {x['machine']} |" for x in lines]
    md += ["", "Commands (`seed={...}` stands for one run per listed seed):", "", "```bash"]
    md += [line["command"] for line in lines] + ["```", ""]
    (out / f"{name}.md").write_text("\n".join(md))
    return out / f"{name}.md"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the rows' seeds and write their tables (``--readme``: time the README's commands)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--readme" in argv:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from readme_times import main as readme_main

        readme_main([a for a in argv if a != "--readme"])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", help="Row keys (default: all; see --list).")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--jobs", type=int, default=2, help="Runs at once (one thread each).")
    parser.add_argument("--runs", help="Run directories (default: <out>/runs).")
    parser.add_argument("--out", help="Where the tables go (default: the repo's benchmarks/).")
    parser.add_argument("--list", action="store_true", help="Print the rows and exit.")
    parser.add_argument("--readme", action="store_true", help="Time the README commands instead.")
    args = parser.parse_args(argv)
    if args.list:
        for row in ROWS:
            print(f"{row.key:30s} {row.table:13s} {command(row, '0')}")
        return
    unknown = set(args.rows or ()) - {r.key for r in ROWS}
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; --list shows them")
    rows = [r for r in ROWS if not args.rows or r.key in args.rows]
    out = Path(args.out).resolve() if args.out else REPO / "benchmarks"
    runs = Path(args.runs).resolve() if args.runs else out / "runs"
    python = sys.executable
    for setup in dict.fromkeys(s for row in rows for s in row.setup):
        subprocess.run([python, *setup], cwd=REPO, check=True, capture_output=True)
    jobs = [(row, seed) for row in rows for seed in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        dirs = list(pool.map(lambda job: run_seed(job[0], job[1], runs, python), jobs))
    stamp = {"commit": commit(), "date": dt.date.today().isoformat(), "machine": machine()}
    for name in dict.fromkeys(row.table for row in rows):
        lines = {line["row"]: line for line in read_table(out / f"{name}.csv")}
        for row in (r for r in rows if r.table == name):
            results = [read_run(row, d) for (r, _), d in zip(jobs, dirs, strict=True) if r is row]
            line = summarise(row, results, args.seeds) | stamp
            line["baseline"] = baseline(row, runs, python)
            lines[row.key] = line
            print(f"{row.key:30s} IQM {interval(line, 'iqm')}  reached "
                  f"{line['reached']}/{line['n']}", flush=True)  # fmt: skip
        order = [r.key for r in ROWS if r.key in lines] + [k for k in lines if k not in
                                                             {r.key for r in ROWS}]  # fmt: skip
        print(write_table(name, [lines[k] for k in order], out))


if __name__ == "__main__":
    main()
