"""Time the README's commands as a reader runs them, and write the times into the README.

Every command in README.md whose comment states a time (``~30 s``, ``~2 min``) runs here
verbatim, in a fresh folder that holds the repository's ``train.py``, ``conf/``,
``scripts/`` and the committed ``data/`` files, with this interpreter first on ``PATH``.
A single run (``python train.py ...`` without ``-m``) runs once per seed (``seed=0``,
``seed=1``, ``seed=2``: ``--seeds``), two at a time (each uses one thread); sweeps,
``torchrun`` and benchmarks, which use both cores, run alone, once. For each command it
records the wall and CPU seconds and how its runs ended, writes
``benchmarks/readme_times.md`` and ``.csv`` (median and range over the seeds), and
replaces the ``~N s`` in the README's comment with the median wall time::

    python scripts/bench/readme_times.py                     # every timed command
    python scripts/bench/readme_times.py --only grpo_digits --no-write
    python scripts/bench/learning_table.py --readme           # the same

``tests/test_readme.py`` runs each command at the budget the README writes (CI's slow
suite, ``AGILERL_README_FULL=1``) and requires its CPU time to stay within the stated
wall time on two cores.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from readme_commands import README, readme_comments, spoken_time, stated_seconds  # noqa: E402

NOT_TIMED = {
    "python scripts/bench/learning_table.py": "~25 min of learning tables (their own timings)",
    "python scripts/bench/off_policy_vs_sb3.py": "~30 min benchmark",
    "python -m pytest -m slow": "the slow suite",
}
"""Commands whose stated time is not measured here, and why."""
SETUP = {
    "python train.py manifest=my_run.yaml training.pop_size=4": (
        "python train.py algorithm=ppo env=cartpole dry_run=true > my_run.yaml"
    ),
}
"""A command that needs what the README's command before it made."""
ENDED = re.compile(r"^(.+? on .+?): (target_reached|completed|time_limit|interrupted|failed)\b")
TIME_TOKEN = re.compile(r"~\d+(?:\.\d+)? ?(?:s|min)\b")
COLUMNS = ["command", "runs", "wall_median", "wall_min", "wall_max", "cpu_median", "outcome",
           "commit", "date", "machine"]  # fmt: skip


@dataclass
class Timing:
    """One run of one command."""

    wall: float
    cpu: float
    outcomes: list[str]


def timed_commands(only: Sequence[str] = ()) -> list[str]:
    """The README commands whose comment states a time (those matching ``only``)."""
    commands = [
        command
        for command, comment in readme_comments().items()
        if stated_seconds(comment) is not None and command not in NOT_TIMED
    ]
    return [c for c in commands if not only or any(word in c for word in only)]


def single_run(command: str) -> bool:
    """One training process: run once per seed, two at a time."""
    last = command.split(" && ")[-1].split()
    return last[:2] == ["python", "train.py"] and "-m" not in last


def workdir() -> Path:
    """A folder laid out like a checkout, whose ``data/`` writes stay inside it."""
    folder = Path(tempfile.mkdtemp(prefix="readme_times_"))
    for name in ("train.py", "conf", "scripts", "hydra_plugins", "tests", "pyproject.toml"):
        (folder / name).symlink_to(REPO / name)
    (folder / "data").mkdir()
    for path in (REPO / "data").iterdir():
        (folder / "data" / path.name).symlink_to(path)
    return folder


def run(command: str, setup: str | None = None) -> Timing:
    """Run ``command`` as a reader would (after ``setup``, in the same folder); its wall
    and CPU seconds and how its runs ended."""
    folder = workdir()
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    try:
        if setup is not None:
            subprocess.run(["bash", "-c", setup], cwd=folder, env=env, check=True,
                           capture_output=True)  # fmt: skip
        log = folder / "output.log"
        start = time.perf_counter()
        with log.open("w") as out:
            process = subprocess.Popen(["bash", "-c", command], cwd=folder, env=env,
                                       stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        text = log.read_text()
        if process.returncode != 0:
            raise RuntimeError(f"{command} exited {process.returncode}:\n{text[-2000:]}")
        outcomes = [m[2] for m in map(ENDED.match, text.splitlines()) if m]
        return Timing(wall, usage.ru_utime + usage.ru_stime, outcomes)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(command: str, seeds: Sequence[int], pool: ThreadPoolExecutor) -> list[Timing]:
    """Every seed's run of a single-run command (in ``pool``), else one run."""
    setup = SETUP.get(command)
    if not single_run(command):
        return [run(command, setup)]
    return list(pool.map(lambda seed: run(f"{command} seed={seed}", setup), seeds))


def summary_line(command: str, timings: list[Timing], stamp: dict[str, str]) -> dict[str, str]:
    walls = [t.wall for t in timings]
    outcomes = sorted({o for t in timings for o in t.outcomes})
    return {
        "command": command,
        "runs": str(len(timings)),
        "wall_median": f"{statistics.median(walls):.1f}",
        "wall_min": f"{min(walls):.1f}",
        "wall_max": f"{max(walls):.1f}",
        "cpu_median": f"{statistics.median(t.cpu for t in timings):.1f}",
        "outcome": " ".join(outcomes) or "-",
        **stamp,
    }


def write_back(lines: dict[str, dict[str, str]], text: str) -> str:
    """The README with each measured command's ``~N s`` set to its median wall time."""
    out: list[str] = []
    pending: list[str] = []  # the lines of a command continued with backslashes
    for line in text.splitlines(keepends=True):
        pending.append(line)
        code = re.split(r"\s{2,}#\s", line, maxsplit=1)[0].rstrip()
        if code.endswith("\\"):
            continue
        command = " ".join(p.split("  #")[0].strip().removesuffix("\\").strip() for p in pending)
        measured = lines.get(command)
        if measured is not None:
            spoken = spoken_time(float(measured["wall_median"]))
            at = next((i for i, p in enumerate(pending) if TIME_TOKEN.search(p)), None)
            if at is None:
                print(f"note: no ~N s beside {command}", file=sys.stderr)
            else:
                pending[at] = TIME_TOKEN.sub(spoken, pending[at], count=1)
        out += pending
        pending = []
    return "".join(out + pending)


def write_table(lines: list[dict[str, str]], out: Path) -> Path:
    """``readme_times.csv`` and ``readme_times.md`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "readme_times.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(lines)
    md = [
        "# README commands: wall time as a reader sees it",
        "",
        "Regenerated by `python scripts/bench/readme_times.py` (or `learning_table.py "
        "--readme`), which also writes each median into the README's comment. Single runs: "
        "seeds 0-2, two at a time, one torch thread each; sweeps, torchrun and benchmarks: "
        "once, alone. Wall seconds: median [min, max]; CPU seconds: median, all processes.",
        "",
        "| command | runs | wall s, median [min, max] | CPU s | how the runs ended |",
        "|---|---|---|---|---|",
    ]
    for x in lines:
        md.append(
            f"| `{x['command']}` | {x['runs']} | {x['wall_median']} [{x['wall_min']}, "
            f"{x['wall_max']}] | {x['cpu_median']} | {x['outcome']} |"
        )
    stamps = sorted({(x["commit"], x["date"], x["machine"]) for x in lines})
    md += ["", *(f"Measured at {c} on {d}, {m}." for c, d, m in stamps), ""]
    (out / "readme_times.md").write_text("\n".join(md))
    return out / "readme_times.md"


def main(argv: Sequence[str] | None = None) -> None:
    """Time the commands, write the table and (unless ``--no-write``) the README."""
    from learning_table import commit, machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=(), help="Substrings of commands to time.")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--out", help="Where the table goes (default: the repo's benchmarks/).")
    parser.add_argument("--no-write", action="store_true", help="Leave README.md as it is.")
    parser.add_argument(
        "--resume", action="store_true", help="Skip commands the table already holds."
    )
    args = parser.parse_args(argv)
    out = Path(args.out).resolve() if args.out else REPO / "benchmarks"
    stamp = {"commit": commit(), "date": dt.date.today().isoformat(), "machine": machine()}
    previous = {}
    if (out / "readme_times.csv").is_file():
        with (out / "readme_times.csv").open() as handle:
            previous = {x["command"]: x for x in csv.DictReader(handle)}
    commands = timed_commands(args.only)
    if args.resume:
        commands = [c for c in commands if c not in previous]
    # single runs two at a time first, then what uses both cores, alone
    commands.sort(key=lambda c: not single_run(c))
    readme_order = list(readme_comments())
    measured: dict[str, dict[str, str]] = {}
    with ThreadPoolExecutor(2) as pool:
        for command in commands:
            line = summary_line(command, measure(command, args.seeds, pool), stamp)
            measured[command] = line
            print(f"{line['wall_median']:>7} s [{line['wall_min']}, {line['wall_max']}]  "
                  f"cpu {line['cpu_median']:>6}  {line['outcome']:<16} {command}",
                  flush=True)  # fmt: skip
            merged = {**previous, **measured}  # written as it goes: a failure loses nothing
            write_table([merged[c] for c in readme_order if c in merged], out)
    print(out / "readme_times.md")
    if not args.no_write:
        README.write_text(write_back({**previous, **measured}, README.read_text()))


if __name__ == "__main__":
    main()
