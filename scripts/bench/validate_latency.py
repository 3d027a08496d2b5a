"""How fast a user learns about a config mistake.

Times, as a user would run them (fresh interpreter each time):
  1. python train.py algorithm=ppo env=cartpole dry_run=true             (valid)
  2. python train.py algorithm=ppo env=cartpole algorithm.clip_cof=0.3 dry_run=true  (typo)
  3. agilerl validate <one manifest file>
and prints the median wall time of each, then an import-time breakdown by
top-level package. Goal: under 1.0 s each on a 2-core machine.

    python scripts/bench/validate_latency.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "tests/manifests/dqn_lunar_lander.yaml"
COMMANDS = {
    "train.py dry run (valid)": ["train.py", "algorithm=ppo", "env=cartpole", "dry_run=true"],
    "train.py dry run (typo, exit 2)": [
        "train.py",
        "algorithm=ppo",
        "env=cartpole",
        "algorithm.clip_cof=0.3",
        "dry_run=true",
    ],
    "agilerl validate FILE": ["-m", "agilerl.cli", "validate", str(MANIFEST)],
}


def time_command(args: list[str], repeat: int) -> tuple[float, int]:
    samples = []
    code = 0
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True)
        samples.append(time.perf_counter() - start)
        code = done.returncode
    return statistics.median(samples), code


def import_breakdown(args: list[str]) -> dict[str, float]:
    """Cumulative import seconds per top-level package, from -X importtime."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=REPO, capture_output=True, text=True
    )
    totals: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            self_us, _, _, module = match.groups()
            totals[module.split(".")[0]] += int(self_us) / 1e6
    return dict(sorted(totals.items(), key=lambda kv: -kv[1])[:8])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'command':36} {'median s':>9} {'exit':>5}")
    for label, command in COMMANDS.items():
        median, code = time_command(command, args.repeat)
        flag = "" if median < 1.0 else "  (over the 1.0 s goal)"
        print(f"{label:36} {median:9.3f} {code:5d}{flag}")
    for label, command in (
        ("train.py dry run", COMMANDS["train.py dry run (valid)"]),
        ("agilerl validate", COMMANDS["agilerl validate FILE"]),
    ):
        print(f"\nimport time by package, {label} (self time, s):")
        for package, seconds in import_breakdown(command).items():
            print(f"  {package:24} {seconds:.3f}")


if __name__ == "__main__":
    main()
