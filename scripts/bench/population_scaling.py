"""Env steps/s of a population of 1, 4 and 8, batched vs sequential, with the CPU FLOP bound.

Each run goes through the real trainer (``LocalTrainer`` from the composed
``algorithm=<dqn|ppo|ddpg|td3|sac> env=<cartpole|pendulum>`` configs, tuned
presets included), with
``training.batched_population`` true or false, a fixed budget of env steps per
member, no target score (so every run takes the whole budget) and the
presets' evaluation schedule (evaluation time counted). Pop 1 is one agent.
A short untimed warm-up run per algorithm and mode comes first (imports and
first calls). Runs of a population size alternate batched/sequential so
machine-load drift affects both alike; with ``--repeats`` every configuration keeps its
fastest round (the least disturbed by other load). One torch thread.

Prints a table and the ratios batched / sequential, and the time of a
batched generation relative to one agent's (pop N batched vs pop 1).
Batched and sequential runs learn the same (the same ``best`` fitness is
printed for both, up to float drift; for the off-policy algorithms with one
memory per member).

With ``--cpu-clock`` every run is timed with process CPU time
(``time.process_time``) instead of wall time: on a loaded, shared machine
the wall clock also counts the time other processes held the cores, CPU
time does not (the envs are stepped in-process, so it covers them). Steps/s
is then the run's env steps over the CPU seconds of ``trainer.train()``.

**The CPU FLOP bound.** Stacking N members removes per-call work (Python,
dispatch, env-loop bookkeeping: paid once per group instead of once per
member) but not the arithmetic of the matmuls: a batched matmul over N
members costs about N single ones on a CPU. So if a sequential member-step
takes ``T`` (1 / the sequential run's steps/s) of which ``M_N`` is matmul
arithmetic (measured as below), the best N stacked members can do is
``N * M_N + (T - M_N)`` for N member-steps, and the ratio batched/sequential
is at most ``bound(N) = N * T / (N * M_N + T - M_N)`` (Amdahl's law with the
matmuls as the serial part). Per algorithm the script measures ``M_N``:

1. one extra sequential pop-1 run of the same budget under
   ``torch.profiler`` (``record_shapes``) counts the matmul kernels one
   member-step runs (``aten::mm/addmm/bmm/baddbmm``, forward, backward,
   acting and evaluation: everything torch runs; these are the leaf kernels,
   so ``linear``/``matmul`` are not counted twice) and times them in situ
   (the kernels' self time);
2. each recorded shape is replayed, outside the profiler, as the batched
   matmul of N stacked copies (``torch.bmm`` / ``baddbmm`` on ``[N, m, k]``,
   what the stacked groups run); its time / N is that shape's per-member
   arithmetic, and the *replayed* ``M_N`` is the count-weighted sum per
   member-step;
3. the *in situ* ``M_N`` is the profiled kernels' self time per step scaled
   by the replayed batching gain (replayed ``M_N`` / replayed ``M_1``).

Two bounds are printed because neither estimate is exact. The replayed one
runs each shape hot in cache, so it underestimates the matmuls (measured:
in-situ kernels take ~2-3x the replayed time) and its bound is generous.
The in-situ one is the profiler's wall-clock time inside the kernels: on a
loaded machine that includes time the process waited for a core while the
step's ``T`` (with ``--cpu-clock``) does not, so it can overstate the
matmuls. Both count env stepping (which stacked members still pay per
sub-env), the per-row Adam kernels and the numpy matmuls of numpy acting
(invisible to the profiler; tiny ``[E, obs] x [obs, 64]`` products) as
removable overhead, so both are upper bounds that no implementation
reaches; ``ratio / bound`` errs low. The table prints, per bound, bound,
ratio / bound (goal >= 0.9) and the matmul share of a sequential step;
``--no-bound`` skips the profiled run.

    python scripts/bench/population_scaling.py [--algos dqn ppo ddpg td3 sac rainbow_dqn] \\
        [--pops 1 4 8] [--steps 4000] [--repeats 3] [--env cartpole] [--cpu-clock] [--no-bound]

``--env`` applies to every algorithm; DDPG, TD3 and SAC (Box actions) default to
``pendulum`` when ``--env`` is not given.

Results: benchmarks/population_scaling.md
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
BATCHED = frozenset({"dqn", "ppo", "ddpg", "td3", "sac", "rainbow_dqn"})
"""Algorithms whose populations train batched (the others fall back to sequential)."""
DEFAULT_ENV = {"ddpg": "pendulum", "td3": "pendulum", "sac": "pendulum"}
"""Each algorithm's env when ``--env`` is not given (``cartpole`` otherwise)."""
EXTRA = {"rainbow_dqn": ("replay_buffer=per_n_step", "training.experience_sharing=false")}
"""Each algorithm's further overrides, both modes: Rainbow's members keep their own PER and
n-step memories (a prioritised memory shared by the population is not batched)."""
CLOCK = [time.perf_counter]  # --cpu-clock: process CPU time (steadier on a loaded machine)
MATMULS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
"""The matmul leaf kernels the FLOP bound counts."""
sys.path.insert(0, str(REPO))  # this checkout's agilerl, even beside an installed one


def _manifest(*overrides: str) -> Any:
    from hydra import compose, initialize_config_dir

    from agilerl.launch.compose import build_manifest
    from agilerl.launch.overrides import normalise_overrides

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        args = normalise_overrides(list(overrides), REPO / "conf")
        return build_manifest(compose(config_name="config", overrides=args))[0]


def run(
    algo: str,
    pop: int,
    batched: bool,
    steps: int,
    workdir: Path,
    seed: int,
    env: str = "cartpole",
    profile: bool = False,
) -> dict:
    """One training run; env steps/s of the run (evaluation included).

    With ``profile`` the run goes under ``torch.profiler`` and the result also
    holds ``matmuls``: a Counter of ``(kernel, input shapes)`` calls.
    """
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
        *EXTRA.get(algo, ()),
    )
    run_dir = workdir / f"{algo}_{pop}_{'b' if batched else 's'}{'_prof' if profile else ''}"
    trainer = LocalTrainer.from_manifest(
        manifest, seed=seed, run_dir=run_dir, verbose=False, logger={"tensorboard": False}
    )
    matmuls: Counter = Counter()
    matmul_self = 0.0  # seconds inside the matmul kernels, as the profiler timed them
    start, cpu = time.perf_counter(), time.process_time()
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            trainer.train()
        for event in prof.events():
            if event.name in MATMULS:
                shapes = tuple(tuple(s) for s in event.input_shapes if s)
                matmuls[event.name, shapes] += 1
                matmul_self += event.self_cpu_time_total * 1e-6
    else:
        trainer.train()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    summary = json.loads((run_dir / "summary.json").read_text())
    steps_done = summary["total_steps"]
    # Wall clock: the run's own measure (summary.json: training and evaluation, not process
    # start-up or the final plots). CPU clock: the steps over the CPU time of train().
    sps = summary["steps_per_second"] if CLOCK[0] is time.perf_counter else steps_done / cpu
    return {
        "steps": steps_done,
        "wall": wall,
        "cpu": cpu,
        "steps_per_second": sps,
        "best_fitness": summary["best_fitness"],
        "matmuls": matmuls,
        "matmul_self": matmul_self,
    }


def _time_call(fn: Any, min_time: float = 0.02) -> float:
    """Seconds per call of ``fn`` (on ``CLOCK``), the best of three timed loops."""
    fn()
    reps, clock = 1, CLOCK[0]
    while True:  # enough repetitions to span min_time
        start = clock()
        for _ in range(reps):
            fn()
        spent = clock() - start
        if spent >= min_time or reps >= 1 << 16:
            break
        reps *= 4
    best = spent / reps
    for _ in range(2):
        start = clock()
        for _ in range(reps):
            fn()
        best = min(best, (clock() - start) / reps)
    return best


def matmul_seconds(matmuls: Counter, n: int) -> float:
    """Seconds of matmul arithmetic per member of ``n`` stacked members, for the whole run.

    Every recorded ``(kernel, shapes)`` is replayed as the batched matmul of
    ``n`` stacked copies; its time / ``n`` times its count is summed.
    """
    total = 0.0
    for (name, shapes), count in matmuls.items():
        mats = [s for s in shapes if len(s) >= 2]
        if len(mats) < 2:
            continue
        a_shape, b_shape = mats[-2], mats[-1]
        # n stacked copies (a kernel that is already batched: n copies of its whole batch)
        copies = n * (a_shape[0] if len(a_shape) == 3 else 1)
        a = torch.randn(copies, *a_shape[-2:])
        b = torch.randn(copies, *b_shape[-2:])
        if name in ("aten::addmm", "aten::baddbmm"):
            bias = torch.randn(a.shape[0], 1, b.shape[-1])
            seconds = _time_call(lambda bias=bias, a=a, b=b: torch.baddbmm(bias, a, b))
        else:
            seconds = _time_call(lambda a=a, b=b: torch.bmm(a, b))
        total += count * seconds / n
    return total


def flop_bound(seq_sps: float, pop: int, matmul_per_step: float) -> float:
    """``N T / (N M + T - M)``: the best batched/sequential ratio for ``pop`` members.

    ``T = 1 / seq_sps`` is a sequential member-step, ``M = matmul_per_step``
    its matmul arithmetic per member when ``pop`` members are stacked (capped at ``T``).
    """
    step = 1.0 / seq_sps
    m = min(matmul_per_step, step)
    return pop * step / (pop * m + step - m)


def main() -> None:
    """Run the grid and print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["dqn", "ppo"])
    parser.add_argument("--pops", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--steps", type=int, default=4000, help="env steps per member")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--env",
        default=None,
        help="conf/env choice for every algorithm (default: cartpole; pendulum for ddpg/td3)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds; each configuration keeps its fastest run"
    )
    parser.add_argument(
        "--cpu-clock",
        action="store_true",
        help="time with process CPU time instead of wall time (for a shared, loaded machine)",
    )
    parser.add_argument(
        "--no-bound", action="store_true", help="skip the profiled run and the FLOP bound"
    )
    args = parser.parse_args()
    if args.cpu_clock:
        CLOCK[0] = time.process_time
    torch.set_num_threads(1)

    def env_of(algo: str) -> str:
        return args.env or DEFAULT_ENV.get(algo, "cartpole")

    results: dict[tuple[str, int, bool], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for algo in args.algos:  # untimed: imports and first-call costs land on no row
            for batched in (False, True):
                run(algo, 2, batched, 300, Path(tmp) / "warmup", args.seed, env_of(algo))
        for round_ in range(args.repeats):
            for algo in args.algos:
                for pop in args.pops:
                    order = (True, False) if (pop + round_) % 2 else (False, True)
                    for batched in order:
                        where = Path(tmp) / str(round_)
                        out = run(algo, pop, batched, args.steps, where, args.seed, env_of(algo))
                        best = results.get((algo, pop, batched))
                        if best is None or out["steps_per_second"] > best["steps_per_second"]:
                            results[algo, pop, batched] = out
                        kind = "batched" if batched else "sequential"
                        if batched and algo not in BATCHED:
                            kind = "fallback"
                        print(
                            f"{algo:4s} pop {pop:2d} {kind:10s} {out['steps']:7d} steps "
                            f"{out['wall']:7.1f} s wall {out['cpu']:7.1f} s cpu "
                            f"{out['steps_per_second']:8.0f} steps/s best {out['best_fitness']}",
                            flush=True,
                        )
        # Matmul arithmetic per member-step, from one profiled sequential pop-1 run:
        # replayed (per_step) and in situ scaled by the replayed batching gain (in_situ).
        per_step: dict[tuple[str, int], float] = {}
        in_situ: dict[tuple[str, int], float] = {}
        if not args.no_bound:
            for algo in args.algos:
                prof = run(
                    algo, 1, False, args.steps, Path(tmp) / "prof", args.seed, env_of(algo), True
                )
                calls, steps = sum(prof["matmuls"].values()), prof["steps"]
                single = matmul_seconds(prof["matmuls"], 1)
                for pop in args.pops:
                    replayed = matmul_seconds(prof["matmuls"], pop)
                    per_step[algo, pop] = replayed / steps
                    gain = replayed / single if single > 0 else 1.0
                    in_situ[algo, pop] = prof["matmul_self"] * gain / steps
                print(
                    f"{algo:4s} profiled: {calls} matmul calls in {steps} steps "
                    f"({len(prof['matmuls'])} shapes); matmul arithmetic per member-step, "
                    "replayed / in situ: "
                    + ", ".join(
                        f"pop {p}: {per_step[algo, p] * 1e6:.1f} / {in_situ[algo, p] * 1e6:.1f} us"
                        for p in args.pops
                    ),
                    flush=True,
                )
    clock = "cpu" if args.cpu_clock else "wall"
    print(
        f"\n({clock} clock) algo pop  batched/s  sequential/s  ratio   bound  ratio/bound  "
        "matmul share | in situ: bound  ratio/bound  share | gen vs pop-1"
    )
    for algo in args.algos:
        one = results.get((algo, 1, False))
        for pop in args.pops:
            b, s = results[algo, pop, True], results[algo, pop, False]
            ratio = b["steps_per_second"] / s["steps_per_second"]
            vs_one = ""
            if one is not None:
                # Time per generation of the population, relative to one agent's.
                vs_one = f"{pop * one['steps_per_second'] / b['steps_per_second']:.2f}x"
            bound_cols = f"{'-':>6s}  {'-':>11s}  {'-':>12s}"
            for m in (per_step.get((algo, pop)), in_situ.get((algo, pop))):
                if m is None:
                    continue
                bound = flop_bound(s["steps_per_second"], pop, m)
                share = min(1.0, m * s["steps_per_second"])
                cols = f"{bound:5.2f}x  {ratio / bound:11.2f}  {share:12.1%}"
                bound_cols = cols if m is per_step.get((algo, pop)) else f"{bound_cols} | {cols}"
            print(
                f"{algo:4s} {pop:3d} {b['steps_per_second']:10.0f} {s['steps_per_second']:13.0f} "
                f"{ratio:6.2f}x  {bound_cols}  {vs_one:>10s}"
            )


if __name__ == "__main__":
    main()
