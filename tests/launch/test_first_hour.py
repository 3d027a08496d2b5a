"""What a new user meets in the first hour: validation that knows, runs that say how they ended.

Each test runs train.py or the agilerl CLI as a user would (subprocesses, real
envs, real sweeps) and checks exit codes and what is printed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sweep_helpers import QUICK, REPO, multirun

from agilerl.arena.models.errors import field_names
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.launch.ledger import Ledger
from agilerl.launch.search_space import default_search_space, parse_search_space

SCRIPT = REPO / "scripts" / "slurm_local_cluster.sh"


def run(*args: str, cwd: Path = REPO, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def _box2d_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("Box2D") is not None


# --- 7. validation that knows what it could know ---------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["traning.max_steps=100"], "unknown section 'traning' (did you mean training.max_steps?)"),
        (
            ["training.max_steps=5000", "training.evo_steps=10000"],
            "evo_steps (10000) must not exceed max_steps (5000): raise training.max_steps to "
            "at least 10000, or lower training.evo_steps to at most 5000",
        ),
        (
            ["network=cnn"],
            "network.encoder_config.arch: cnn needs image observations (a 3-D Box, channels "
            "first), but CartPole-v1 observes vectors of shape (4,); use network=mlp",
        ),
        (
            ["environment.name=CartPol-v1"],
            "environment.name: 'CartPol-v1' is not a registered gymnasium id "
            "(did you mean CartPole-v1?)",
        ),
    ],
)
def test_dry_run_refuses_what_the_run_would_crash_on(args: list[str], expected: str) -> None:
    result = run("train.py", *args, "dry_run=true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_misspelt_section_without_dry_run_is_our_error_not_hydras() -> None:
    result = run("train.py", "traning.max_steps=100")
    assert result.returncode == 2
    assert "did you mean training.max_steps?" in result.stderr
    assert "+traning" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(_box2d_installed(), reason="Box2D is installed here")
def test_lunar_lander_without_box2d_names_our_extra() -> None:
    result = run("train.py", "env=lunar_lander", "dry_run=true")
    assert result.returncode == 2
    assert 'LunarLander-v3 needs Box2D, which is not installed: pip install -e ".[box2d]"' in (
        result.stderr
    )
    assert "swig" not in result.stderr and "Traceback" not in result.stderr


def test_algorithms_lists_every_algorithm_once_with_its_aliases() -> None:
    result = run("-m", "agilerl.cli", "algorithms")
    assert result.returncode == 0
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    names = [row.split("│")[1].strip() for row in rows]
    assert len(names) == len(set(names)) == len({id(c) for _, c in MANIFEST_REGISTRY.items()})
    rainbow = next(row for row in rows if row.split("│")[1].strip() == "RainbowDQN")
    assert "'Rainbow DQN'" in rainbow
    assert not any(len(line) < 40 and line.startswith("│ ") for line in rows)  # nothing folded


# --- 3, 5. a run says how it ended; statistics of its evaluations -------------------------
@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    cwd = tmp_path_factory.mktemp("smoke")
    result = run(
        str(REPO / "train.py"),
        "training=smoke",
        "training.eval_loop=4",
        "environment.num_envs=2",
        "logger.tensorboard=false",
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (cwd / "runs").glob("*/*")
    yield run_dir, result.stdout


def test_run_prints_status_fitness_wall_time_and_run_dir(smoke_run: tuple[Path, str]) -> None:
    run_dir, stdout = smoke_run
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = stdout.strip().splitlines()[-4:]
    assert lines[0].startswith(f"PPO on CartPole-v1: {summary['status']}: ")
    assert "budget done at step 4,096" in lines[0] or "target 475 reached" in lines[0]
    assert f"best fitness {summary['best_fitness']:.2f}" in lines[1]
    assert f"(std over {summary['eval_episodes']} episodes)" in lines[1]
    assert lines[2].startswith("  wall time ")
    assert lines[3] == f"  run dir {run_dir.resolve()}" or lines[3].endswith(str(run_dir.name))


def test_no_empty_train_log_and_evaluation_spread_is_recorded(
    smoke_run: tuple[Path, str],
) -> None:
    run_dir, _ = smoke_run
    assert not list(run_dir.rglob("*.log"))
    import csv

    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert rows and all(int(r["eval_episodes"]) == 4 for r in rows)
    assert all(float(r["eval_std"]) >= 0 for r in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval_episodes"] == 4 and summary["final_fitness_std"] is not None


def test_evaluate_prints_mean_std_and_a_confidence_interval(smoke_run: tuple[Path, str]) -> None:
    run_dir, _ = smoke_run
    result = run("-m", "agilerl.cli", "evaluate", str(run_dir), "--episodes", "5")
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("episodes: 5"))
    assert " ± " in line and "95% CI [" in line and "n=5" in line


def test_sweep_summary_aggregates_seeds(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    for lr, seed, fitness in [
        ("1e-3", 0, 10.0),
        ("1e-3", 1, 20.0),
        ("1e-3", 2, 30.0),
        ("3e-4", 0, 50.0),
        ("3e-4", 1, 60.0),
    ]:
        overrides = [f"algorithm.lr={lr}", f"seed={seed}"]
        key = ",".join(sorted(overrides))
        ledger.append(key=key, overrides=overrides, state="running")
        ledger.append(
            key=key, overrides=overrides, state="completed", best_fitness=fitness, wall_seconds=2.0
        )
    result = run("-m", "agilerl.cli", "sweep", "summary", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    first, second = ([c.strip() for c in r.split("│")[1:-1]] for r in rows)
    # IQM of two runs is their mean; a 2-run bootstrap puts 1/4 of its mass on each end
    assert first[:7] == ["1", "2", "0,1", "55.00 [50.00, 60.00]", "55.00 [50.00, 60.00]",
                         "55.00 [50.00, 60.00]", "55.00"]  # fmt: skip
    # three runs: each end of the bootstrap of their mean has mass 1/27 > 2.5%
    assert second[:4] == ["2", "3", "0,1,2", "20.00 [10.00, 30.00]"]
    # no run directory says what the final evaluation was: the best one is shown, labelled
    assert "IQM best" in result.stdout and "the best evaluation is shown" in result.stdout
    assert (
        "best: IQM best fitness 55.00 [50.00, 60.00] (95% CI, n=2) with algorithm.lr=3e-4"
    ) in result.stdout
    # every run of one setting beats every run of the other
    assert "P(algorithm.lr=3e-4 > algorithm.lr=1e-3) = 1.00 [1.00, 1.00]" in result.stdout
    assert (tmp_path / "sweep_summary.png").exists() and (tmp_path / "sweep_profile.png").exists()


def test_sweep_summary_reads_final_fitness_steps_to_target_and_curves(tmp_path: Path) -> None:
    """With run directories the final evaluation (not the best) is aggregated, the
    steps to the target get an interval, and the learning curves are drawn."""
    import json

    ledger = Ledger(tmp_path)
    finals = [100.0, 200.0, 300.0, 400.0, 5000.0]  # an outlier the IQM leaves out
    for seed, final in enumerate(finals):
        run_dir = tmp_path / f"run{seed}"
        run_dir.mkdir()
        solved = 1000 * (seed + 1) if seed < 3 else None
        (run_dir / "summary.json").write_text(
            json.dumps({"final_fitness": final, "solved_at_step": solved})
        )
        (run_dir / "metrics.csv").write_text(
            f"step,agent,fitness\n512,0,1.0\n512,1,2.0\n1024,0,{final}\n1024,1,3.0\n"
        )
        overrides = [f"seed={seed}"]
        ledger.append(key=f"seed={seed}", overrides=overrides, state="completed",
                      best_fitness=final + 1, wall_seconds=1.0, run_dir=str(run_dir))  # fmt: skip
    result = run("-m", "agilerl.cli", "sweep", "summary", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("│")]
    cells = [c.strip() for c in row.split("│")[1:-1]]
    # IQM of 5 runs: floor(5/4) = 1 cut from each end -> mean(200, 300, 400) = 300
    assert cells[1] == "5" and cells[3].startswith("300.00 [")
    assert cells[4].startswith("300.00 [") and cells[5].startswith("1200.00 [")  # median, mean
    assert cells[7].startswith("3/5: 2,000 [")  # three runs reached the target
    assert "IQM final" in result.stdout
    assert (tmp_path / "sweep_summary.png").stat().st_size > 10_000


# --- 5. sweeps: per-job progress, and a rerun says what it skips ---------------------------
@pytest.mark.slow
def test_local_launcher_shows_each_job_and_a_rerun_says_it_skips(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    first = multirun(sweep, "hydra/launcher=local", "seed=0,1", *QUICK)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "submitted 2 job(s) to local" in first.stdout
    for num in (0, 1):
        assert f"job {num} [seed={num}]" in first.stdout
    assert "(2/2 done)" in first.stdout
    again = multirun(sweep, "hydra/launcher=local", "seed=0,1", *QUICK)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 of 2 job(s) already finished there (ledger.jsonl); skipping them, running 0" in (
        again.stdout
    )
    assert "skipped [completed" in again.stdout and "nothing to run" in again.stdout


# --- 8. Optuna: per-algorithm spaces, refusal of fields the algorithm lacks -----------------
@pytest.mark.parametrize("name", MANIFEST_REGISTRY.names())
def test_every_default_space_is_the_specs_mutation_ranges(name: str) -> None:
    spec_cls = MANIFEST_REGISTRY.get(name)
    raw = default_search_space(spec_cls)
    space = parse_search_space(raw)
    ranges = spec_cls.mutation_ranges()
    for path, param in space.items():
        section, _, field = path.partition(".")
        assert section == "algorithm" and field in field_names(spec_cls), path
        assert (param.low, param.high) == (ranges[field].low, ranges[field].high)
        assert param.log == ranges[field].log_scale
    assert space


def test_optuna_refuses_a_space_field_the_algorithm_lacks(tmp_path: Path) -> None:
    done = multirun(
        tmp_path / "opt",
        "hydra/sweeper=optuna",
        "algorithm=ppo",
        "hydra.sweeper.search_space={algorithm: {tau: {type: float, low: 0.001, high: 0.1}}}",
    )
    assert done.returncode == 2
    assert "hydra.sweeper.search_space.algorithm.tau: PPO has no field 'tau'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("algorithm", "field"), [("dqn", "tau"), ("ppo", "update_epochs")])
def test_optuna_uses_the_algorithms_default_space(
    tmp_path: Path, algorithm: str, field: str
) -> None:
    done = multirun(
        tmp_path / algorithm,
        "hydra/sweeper=optuna",
        f"algorithm={algorithm}",
        "hydra.sweeper.n_trials=0",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"search space ({algorithm.upper()}'s default)" in done.stdout
    assert f"  algorithm.{field}: " in done.stdout
    if algorithm == "ppo":  # the range declared on PPOSpec.learn_step
        assert "algorithm.learn_step: int 512..8192\n" in done.stdout


# --- 9. the local SLURM cluster script on a shared machine ---------------------------------
def _listen() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_cluster_script_picks_free_ports_and_keeps_them(tmp_path: Path) -> None:
    busy = _listen()
    port = busy.getsockname()[1]
    env = {
        "AGILERL_SLURM_DIR": str(tmp_path / "c"),
        "AGILERL_SLURM_PORT": "",
        "PATH": "/usr/bin:/bin",
    }
    env["AGILERL_SLURM_DB_PORT"] = str(port + 100)
    first = subprocess.run(
        ["bash", str(SCRIPT), "ports"], capture_output=True, text=True, env=env, check=True
    )
    chosen = dict(line.split("=") for line in first.stdout.split())
    assert chosen["DB_PORT"] == str(port + 100)
    ports = [int(chosen[k]) for k in ("CTLD_PORT", "SLURMD_PORT", "DBD_PORT")]
    assert len(set(ports)) == 3 and port not in ports
    again = subprocess.run(
        ["bash", str(SCRIPT), "ports"], capture_output=True, text=True, env=env, check=True
    )
    assert again.stdout == first.stdout
    busy.close()


def test_cluster_stop_leaves_other_peoples_job_steps_alone(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["bash", "-c", 'exec -a "slurmstepd: [99.0]" sleep 60'])
    try:
        time.sleep(0.3)
        (tmp_path / "c" / "run").mkdir(parents=True)
        env = {"AGILERL_SLURM_DIR": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"}
        stop = subprocess.run(
            ["bash", str(SCRIPT), "stop"], capture_output=True, text=True, env=env
        )
        assert stop.returncode == 0, stop.stderr
        assert bystander.poll() is None, "stop killed a job step it did not start"
    finally:
        bystander.kill()
        bystander.wait()


def test_validate_checks_the_env_id_as_a_dry_run_does(tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "algorithm: {name: PPO}\nenvironment: {name: CartPol-v1}\ntraining: {max_steps: 1000}\n"
    )
    checked = run("-m", "agilerl.cli", "validate", str(manifest))
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "not a registered gymnasium id (did you mean CartPole-v1?)" in checked.stderr
    manifest.write_text(manifest.read_text().replace("CartPol-v1", "CartPole-v1"))
    assert run("-m", "agilerl.cli", "validate", str(manifest)).returncode == 0
