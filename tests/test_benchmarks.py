"""The committed learning tables in ``benchmarks/``: complete, and their commands reproduce them.

The tables are written by ``scripts/bench/learning_table.py``. The fast checks read them;
the slow check re-runs the cheapest rows' commands for every committed seed and requires
the new IQM to lie inside the committed 95% interval (same seeds on a CPU give the same
runs, so a move outside it means the code's learning changed).
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# The list: every one of these has a row over at least five seeds.
REQUIRED = {
    "ppo", "dqn", "rainbow_dqn", "ddpg", "td3", "sac", "recurrent_ppo", "ippo_speaker_listener",
    "matd3_speaker_listener", "cqn", "neural_ucb", "grpo_digits", "sft_chat", "dpo_preference",
}  # fmt: skip
REPRODUCED = ("ppo_cartpole", "neural_ucb_iris")


def _script():
    spec = importlib.util.spec_from_file_location(
        "learning_table", REPO / "scripts" / "bench" / "learning_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _lines() -> dict[str, dict[str, str]]:
    lines = {}
    for name in _script().TABLE_TITLES:  # the learning tables (readme_times.csv is not one)
        path = BENCHMARKS / f"{name}.csv"
        with path.open() as handle:
            lines |= {line["row"]: line for line in csv.DictReader(handle)}
    return lines


def test_every_required_algorithm_has_a_row_over_five_seeds() -> None:
    lines = _lines()
    algorithms = {line["algorithm"] for line in lines.values()} | set(lines)
    assert algorithms >= REQUIRED, REQUIRED - algorithms
    for row, line in lines.items():
        assert int(line["n"]) >= 5, row
        assert float(line["iqm_low"]) <= float(line["iqm"]) <= float(line["iqm_high"]), row
        assert line["command"].startswith("python train.py") and line["commit"], row


def test_every_row_beats_its_baseline() -> None:
    """A published number means something only above what a non-learner scores."""
    table = _script()
    rows = {row.key: row for row in table.ROWS}
    for key, line in _lines().items():
        if line["baseline"] == "":
            continue
        baseline = float(line["baseline"])
        if rows[key].higher_is_better:
            better = float(line["iqm_low"]) > baseline
        else:
            better = float(line["iqm_high"]) < baseline
        assert better, (key, line["iqm_low"], line["iqm_high"], baseline)


def test_the_tables_list_the_rows_the_script_knows() -> None:
    table = _script()
    assert set(_lines()) == {row.key for row in table.ROWS}
    for row in table.ROWS:
        assert (BENCHMARKS / f"{row.table}.md").is_file(), row.table


@pytest.mark.slow
@pytest.mark.parametrize("key", REPRODUCED)
def test_the_committed_commands_reproduce_their_numbers(key: str, tmp_path: Path) -> None:
    table = _script()
    line = _lines()[key]
    row = next(r for r in table.ROWS if r.key == key)
    seeds = [int(s) for s in line["seeds"].split()]
    results = [
        table.read_run(row, table.run_seed(row, seed, tmp_path, sys.executable)) for seed in seeds
    ]
    again = table.summarise(row, results, seeds)
    low, high = float(line["iqm_low"]), float(line["iqm_high"])
    assert low <= again["iqm"] <= high, (again["iqm"], line)
    assert again["reached"] >= int(line["reached"]) - 1, (again, line)
