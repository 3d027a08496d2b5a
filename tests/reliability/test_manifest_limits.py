"""Cases 4, 6, 16, 23: manifest loading is bounded (aliases, devices, duplicates, depth)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.loading import read_manifest_file
from tests.reliability.helpers import no_traceback, run, train

BOMB = """a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
algorithm: {name: PPO}
environment: {name: CartPole-v1, config: {x: *i}}
"""


def test_case_04_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 700
    with pytest.raises(ConfigError, match=r"alias \*a is not allowed.*line 2"):
        read_manifest_file(bomb)
    checked = run("-m", "agilerl.cli", "validate", str(bomb), timeout=60)
    assert checked.returncode == 2 and "alias" in checked.stderr
    dry = train(f"manifest={bomb}", "dry_run=true", timeout=60)
    assert dry.returncode == 2 and "alias" in dry.stderr and no_traceback(dry)


def test_case_06_devices_and_pipes_are_not_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        read_manifest_file("/dev/zero")
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_manifest_file(pipe)
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (2 << 20))
    with pytest.raises(ConfigError, match="at most 1,048,576 bytes"):
        read_manifest_file(big)
    checked = run("-m", "agilerl.cli", "validate", "/dev/zero", str(pipe), timeout=60)
    assert checked.returncode == 2 and no_traceback(checked)
    assert checked.stderr.count("not a regular file") == 2


def test_case_16_duplicate_keys_are_an_error(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "algorithm:\n  name: PPO\nenvironment:\n  name: CartPole-v1\nalgorithm:\n  name: DQN\n"
    )
    with pytest.raises(ConfigError, match=r"duplicate key 'algorithm' \(first at line 1\).*line 5"):
        read_manifest_file(twice)
    nested = tmp_path / "nested.json"
    nested.write_text('{"algorithm": {"name": "PPO", "lr": 0.1, "lr": 0.2}}')
    with pytest.raises(ConfigError, match="duplicate key 'lr'"):
        read_manifest_file(nested)
    checked = run("-m", "agilerl.cli", "validate", str(twice))
    assert checked.returncode == 2 and "duplicate key" in checked.stderr


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_case_23_deep_nesting_is_a_clear_error(tmp_path: Path, suffix: str) -> None:
    deep = tmp_path / f"deep{suffix}"
    deep.write_text(
        json.dumps({"algorithm": {"name": "PPO"}})[:-1] + ', "x": ' + "[" * 2000 + "]" * 2000 + "}"
    )
    with pytest.raises(ConfigError, match="nested deeper than 32 levels"):
        read_manifest_file(deep)
    checked = run("-m", "agilerl.cli", "validate", str(deep))
    assert checked.returncode == 2 and no_traceback(checked) and "nested deeper" in checked.stderr


def test_ordinary_manifests_still_load(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("algorithm:\n  name: PPO\n  lr: 0.001\nenvironment: {name: CartPole-v1}\n")
    assert read_manifest_file(path)["algorithm"]["lr"] == 0.001


def test_a_manifest_file_cannot_read_environment_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``${oc.env:...}`` in a file used to be resolved into the manifest the run wrote."""
    leaky = tmp_path / "leaky.yaml"
    leaky.write_text(
        "algorithm: {name: PPO}\nenvironment: {name: CartPole-v1}\n"
        "training: {name: '${oc.env:AGILERL_TEST_SECRET}', max_steps: 1000}\n"
    )
    monkeypatch.setenv("AGILERL_TEST_SECRET", "hunter2")  # the child inherits it
    done = train(f"manifest={leaky}", "dry_run=true")
    assert done.returncode == 2 and no_traceback(done)
    assert "training.name: '${oc.env:AGILERL_TEST_SECRET}' is an interpolation" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


def test_a_deeply_nested_override_is_refused_without_a_traceback() -> None:
    done = train("training.name=" + "[" * 10_000 + "]" * 10_000, "dry_run=true")
    assert done.returncode == 2 and no_traceback(done)
    assert "training.name: a value nested 10000 levels deep" in done.stderr


def test_control_characters_in_a_manifest_or_an_override_exit_2(tmp_path: Path) -> None:
    manifest = tmp_path / "ctl.yaml"
    manifest.write_text('algorithm: {name: PPO}\nenvironment: {name: "Cart\x07Pole-v1"}\n')
    done = train(f"manifest={manifest}", "dry_run=true")
    assert done.returncode == 2 and no_traceback(done)
    assert "ctl.yaml" in done.stderr and "#x0007" in done.stderr
    override = train("training.name=a\x07b", "dry_run=true")
    assert override.returncode == 2 and no_traceback(override)
    assert "control character '\\x07'" in override.stderr
