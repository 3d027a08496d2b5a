"""train.py and the agilerl CLI as a user runs them: exit codes and messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_dry_run_prints_the_manifest_and_writes_nothing(tmp_path: Path) -> None:
    result = run(
        str(REPO / "train.py"), "algorithm=ppo", "env=cartpole", "dry_run=true", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    assert manifest["algorithm"]["name"] == "PPO"
    assert manifest["environment"]["name"] == "CartPole-v1"
    assert list(tmp_path.iterdir()) == []


def test_typo_exits_2_naming_the_field() -> None:
    result = run(
        "train.py", "algorithm=ppo", "env=cartpole", "algorithm.clip_cof=0.3", "dry_run=true"
    )
    assert result.returncode == 2
    assert "algorithm.clip_cof: unknown field (did you mean clip_coef?)" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["algorithm=dqn", "env=pendulum"], "environment.name: DQN needs a discrete action space"),
        (
            ["algorithm=maddpg", "env=cartpole"],
            "environment.env_type: MADDPG trains on a PettingZoo",
        ),
        (["algorithm=grpo", "env=llm_countdown"], "network=llm_lora"),
        (["algorithm=ppx"], "no option 'ppx' in config group algorithm (did you mean ppo?)"),
        (["algorithm.lr=fast"], "algorithm.lr: "),
        (["training.pop_size=0"], "training.pop_size: "),
        (["+algorithm.x=1"], "algorithm.x: unknown field"),
        (["seed=-1"], "seed: "),
        (["dryrun=true"], "dryrun: unknown option (did you mean dry_run?)"),
        (["manifest=/nonexistent/m.yaml"], "manifest file not found: /nonexistent/m.yaml"),
    ],
)
def test_user_errors_exit_2_without_traceback(args: list[str], expected: str) -> None:
    result = run("train.py", *args, "dry_run=true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_several_problems_are_listed_together() -> None:
    result = run("train.py", "algorithm.clip_cof=1", "training.max_step=5", "dry_run=true")
    assert result.returncode == 2
    assert "algorithm.clip_cof" in result.stderr and "training.max_step" in result.stderr


def test_manifest_file_with_overrides_on_top(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps(
            {
                "algorithm": {"name": "DQN", "lr": 0.01},
                "environment": {"name": "Acrobot-v1", "num_envs": 2},
            }
        )
    )
    result = run(
        "train.py", f"manifest={path}", "algorithm.lr=0.5", "env.num_envs=3", "dry_run=true"
    )
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    assert manifest["algorithm"]["lr"] == 0.5
    assert manifest["environment"]["num_envs"] == 3
    refused = run("train.py", f"manifest={path}", "algorithm=ppo", "dry_run=true")
    assert refused.returncode == 2 and "already chooses its algorithm" in refused.stderr


def test_cli_validate_schema_algorithms(tmp_path: Path) -> None:
    good = REPO / "tests/manifests/ppo_cartpole.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "algorithm: {name: PPO, clip_cof: 1, lr: -1}\nenvironment: {name: CartPole-v1}\n"
    )
    ok = run("-m", "agilerl.cli", "validate", str(good))
    assert ok.returncode == 0 and "ok:" in ok.stdout
    both = run("-m", "agilerl.cli", "validate", str(good), str(bad), str(tmp_path / "none.yaml"))
    assert both.returncode == 2
    assert f"{bad}: algorithm.clip_cof: unknown field (did you mean clip_coef?)" in both.stderr
    assert f"{bad}: algorithm.lr" in both.stderr and "none.yaml" in both.stderr
    schema = run("-m", "agilerl.cli", "schema")
    assert schema.returncode == 0 and json.loads(schema.stdout)["title"]
    table = run("-m", "agilerl.cli", "algorithms")
    assert table.returncode == 0
    for name in ("PPO", "MADDPG", "GRPO", "train_off_policy"):
        assert name in table.stdout
    rows = {line.split("│")[1].strip(): line for line in table.stdout.splitlines() if "│" in line}
    from agilerl.arena.models.registry import MANIFEST_REGISTRY
    from agilerl.strategies import strategy_for

    for name, spec_cls in MANIFEST_REGISTRY.items():
        # the defaults' algorithm is asked too (Recurrent PPO's default is recurrent: true);
        # a spec with a required field (GRPO's group_size) asks the paradigm alone
        try:
            defaults = spec_cls()
        except ValueError:
            defaults = None
        trains = strategy_for(spec_cls).unavailable_reason(defaults) is None
        # an alias is listed in its algorithm's row ("also" column)
        row = rows.get(name) or next(r for r in rows.values() if repr(name) in r)
        assert ("│ yes" in row) is trains, row
