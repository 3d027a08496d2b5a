"""How fast a user learns about a config mistake, against the floor of the tools we build on.

Times, as a user would run them (a fresh interpreter each time):
  1. python train.py algorithm=ppo env=cartpole dry_run=true             (valid)
  2. python train.py algorithm=ppo env=cartpole algorithm.clip_cof=0.3 dry_run=true  (typo)
  3. agilerl validate <one manifest file>
and, in the same run, two baselines:
  4. a minimal Hydra + Pydantic app: compose one config, validate one model
     (in a temporary directory, with only the installed Hydra plugins on its path);
  5. python -c "import pydantic, yaml; yaml.safe_load(<the manifest>)"
  6. the same, then validating the parsed manifest with a one-field Pydantic model
     (``import pydantic`` alone loads almost nothing: building any validator is
     the floor of validating, so this is shown too)
Commands are interleaved (one of each per round) so load on a shared machine
falls on all of them alike. Prints the median wall and CPU (user + system)
seconds of each, the ratios the goals name (dry run <= 2x the minimal app;
``agilerl validate`` <= 1.2x import-pydantic-and-parse), whether the training
stack (torch, gymnasium, submitit) was imported, and an import-time breakdown.

    python scripts/bench/validate_latency.py [--repeat 7] [--repo OTHER_CHECKOUT]

Every command runs with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from
the environment, as on a user's machine): where it is set (this sandbox sets it), the
project's own modules would be recompiled from source at every start while the
installed libraries load their compiled files, which charges ~0.1 s to our side only.

``--repo`` times another checkout of the project (e.g. the main branch, for a
before/after comparison) with the same baselines.

Results: benchmarks/validate_latency.md
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "tests/manifests/dqn_lunar_lander.yaml"
HEAVY = ("torch", "gymnasium", "submitit")
QUIET = ["hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]

MINIMAL_APP = """
import os
import sys

# Only the installed plugins: drop path entries that carry this repository's hydra_plugins.
sys.path[:] = [p for p in sys.path if not os.path.isdir(p + "/hydra_plugins/agilerl_plugins")]

import hydra
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    lr: float
    batch_size: int


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    print(Spec.model_validate(OmegaConf.to_container(cfg, resolve=True)))


if __name__ == "__main__":
    main()
"""


def commands(app_dir: Path, repo: Path = REPO) -> dict[str, tuple[list[str], Path]]:
    """Label -> (python arguments, working directory)."""
    manifest = repo / MANIFEST.relative_to(REPO)
    return {
        "train.py dry run (valid)": (
            ["train.py", "algorithm=ppo", "env=cartpole", "dry_run=true"],
            repo,
        ),
        "train.py dry run (typo, exit 2)": (
            ["train.py", "algorithm=ppo", "env=cartpole", "algorithm.clip_cof=0.3", "dry_run=true"],
            repo,
        ),
        "agilerl validate FILE": (["-m", "agilerl.cli", "validate", str(manifest)], repo),
        "minimal Hydra + Pydantic app": (
            [str(app_dir / "app.py"), *QUIET, "hydra.run.dir=."],
            app_dir,
        ),
        "import pydantic + parse YAML": (
            [
                "-c",
                f"import pydantic, yaml; yaml.safe_load(open({str(manifest)!r}))",
            ],
            repo,
        ),
        "... + validate one Pydantic model": (
            [
                "-c",
                "import pydantic, yaml\n"
                f"data = yaml.safe_load(open({str(manifest)!r}))\n"
                "class M(pydantic.BaseModel):\n"
                "    model_config = pydantic.ConfigDict(extra='allow')\n"
                "    algorithm: dict\n"
                "M.model_validate(data)",
            ],
            repo,
        ),
    }


def write_minimal_app(folder: Path) -> None:
    (folder / "conf").mkdir(parents=True, exist_ok=True)
    (folder / "conf" / "config.yaml").write_text("name: DQN\nlr: 0.001\nbatch_size: 64\n")
    (folder / "app.py").write_text(MINIMAL_APP)


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The environment of every timed command: bytecode caching on, as on a user's machine."""


def run_once(args: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of one fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def imported(args: list[str], cwd: Path) -> tuple[dict[str, float], list[str]]:
    """Self import seconds per top-level package (top 8), and the heavy packages imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=ENV,
    )
    totals: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            self_us, _, _, module = match.groups()
            totals[module.split(".")[0]] += int(self_us) / 1e6
    heavy = sorted(p for p in totals if p in HEAVY)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1])[:8]), heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        app_dir = Path(tmp)
        write_minimal_app(app_dir)
        table = commands(app_dir, args.repo.resolve())
        print(f"checkout: {args.repo.resolve()}")
        for command, cwd in table.values():  # warm-up: disk caches, the env facts cache
            run_once(command, cwd)
        walls: dict[str, list[float]] = defaultdict(list)
        cpus: dict[str, list[float]] = defaultdict(list)
        codes: dict[str, int] = {}
        for _ in range(args.repeat):
            for label, (command, cwd) in table.items():
                wall, cpu, code = run_once(command, cwd)
                walls[label].append(wall)
                cpus[label].append(cpu)
                codes[label] = code
        print(
            f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
            f"{args.repeat} interleaved rounds"
        )
        print(f"{'command':36} {'median s':>9} {'cpu s':>7} {'exit':>5}")
        wall = {k: statistics.median(v) for k, v in walls.items()}
        cpu = {k: statistics.median(v) for k, v in cpus.items()}
        for label in table:
            print(f"{label:36} {wall[label]:9.3f} {cpu[label]:7.3f} {codes[label]:5d}")
        app, floor = "minimal Hydra + Pydantic app", "import pydantic + parse YAML"
        for label, base, goal in (
            ("train.py dry run (valid)", app, 2.0),
            ("train.py dry run (typo, exit 2)", app, 2.0),
            ("agilerl validate FILE", floor, 1.2),
            ("agilerl validate FILE", "... + validate one Pydantic model", None),
        ):
            ratio_wall, ratio_cpu = wall[label] / wall[base], cpu[label] / cpu[base]
            verdict = (
                ""
                if goal is None
                else f" ({'meets' if ratio_wall <= goal else 'misses'} the {goal}x goal)"
            )
            print(f"{label} / {base}: {ratio_wall:.2f}x wall, {ratio_cpu:.2f}x cpu{verdict}")
        for label in ("train.py dry run (valid)", "agilerl validate FILE", app):
            command, cwd = table[label]
            breakdown, heavy = imported(command, cwd)
            print(
                f"\nimport time by package, {label} (self time, s); "
                f"training stack imported: {', '.join(heavy) or 'none'}"
            )
            for package, seconds in breakdown.items():
                print(f"  {package:24} {seconds:.3f}")


if __name__ == "__main__":
    main()
