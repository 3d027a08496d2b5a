"""Cases 1-3: code named by data runs only with the user's opt-in (trust_code)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agilerl.arena.models.errors import ConfigError
from agilerl.evaluate import evaluate_checkpoint
from agilerl.trainer import LocalTrainer
from tests.reliability.helpers import REPO, TINY_PPO, no_traceback, run, train, write_manifest


def _system_env(marker: Path) -> dict:
    return {
        "name": "CartPole-v1",
        "num_envs": 1,
        "entrypoint": "os:system",
        "config": {"command": f"touch {marker}"},
    }


def test_case_01_entrypoint_refused_without_opt_in(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    manifest = write_manifest(tmp_path / "m.yaml", _system_env(marker))
    checked = run("-m", "agilerl.cli", "validate", str(manifest))
    assert checked.returncode == 0
    assert "runs code" in checked.stderr and "environment.entrypoint" in checked.stderr
    assert "--trust-code" in checked.stderr
    refused = train(f"manifest={manifest}", f"run_dir={tmp_path / 'run'}")
    assert refused.returncode == 2 and no_traceback(refused)
    assert "environment.entrypoint" in refused.stderr and "trust_code=true" in refused.stderr
    with pytest.raises(ConfigError, match=r"environment\.entrypoint"):
        LocalTrainer(TINY_PPO, _system_env(marker), run_dir=tmp_path / "api")
    assert not marker.exists()
    assert not (tmp_path / "run").exists() and not (tmp_path / "api").exists()


def test_case_01_with_opt_in_the_entrypoint_is_called(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    # With the opt-in the documented behaviour holds: entrypoint(**config) is called to make
    # the env (os.system returns an int, so building the env then fails, naming the env).
    trainer = LocalTrainer(
        TINY_PPO, _system_env(marker), run_dir=tmp_path / "run", verbose=False, trust_code=True
    )
    with pytest.raises(Exception):  # noqa: B017 - any failure after the call is fine here
        trainer.train()
    assert marker.exists()


def test_case_02_a_run_directorys_manifest_gets_no_trust(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    LocalTrainer(
        TINY_PPO,
        {"name": "CartPole-v1", "num_envs": 1},
        {"max_steps": 64, "evo_steps": 64, "eval_steps": 10},
        run_dir=run_dir,
        verbose=False,
    ).train()
    marker = tmp_path / "pwned"
    stored = yaml.safe_load((run_dir / "manifest.yaml").read_text())
    stored["environment"].update(entrypoint="os:system", config={"command": f"touch {marker}"})
    (run_dir / "manifest.yaml").write_text(yaml.safe_dump(stored))
    with pytest.raises(ConfigError, match=r"environment\.entrypoint.*--trust-code"):
        evaluate_checkpoint(run_dir, episodes=1)
    cli = run("-m", "agilerl.cli", "evaluate", str(run_dir), "--episodes", "1")
    assert cli.returncode == 2 and "--trust-code" in cli.stderr and no_traceback(cli)
    resumed = train(f"resume={run_dir}", "training.max_steps=128")
    assert resumed.returncode == 2 and "trust_code=true" in resumed.stderr
    assert not marker.exists()


def test_case_03_module_prefixed_gym_id_needs_opt_in(tmp_path: Path) -> None:
    (tmp_path / "evilmod.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').write('x')\n")
    manifest = write_manifest(tmp_path / "m.yaml", {"name": "evilmod:Foo-v0", "num_envs": 1})
    checked = run("-m", "agilerl.cli", "validate", str(manifest), cwd=tmp_path)
    assert "environment.name" in checked.stderr and "runs code" in checked.stderr
    refused = train(f"manifest={manifest}", f"run_dir={tmp_path / 'run'}", cwd=tmp_path)
    assert refused.returncode == 2 and "environment.name" in refused.stderr
    assert "trust_code=true" in refused.stderr
    assert not (tmp_path / "imported").exists()


def test_validate_lists_every_code_field_and_dry_run_notes_them(tmp_path: Path) -> None:
    manifest = write_manifest(
        tmp_path / "m.yaml",
        {"name": "CartPole-v1", "wrappers": ["mypkg.wrappers:Spy"], "path": str(tmp_path)},
    )
    checked = run("-m", "agilerl.cli", "validate", "--trust-code", str(manifest))
    assert checked.returncode == 0, checked.stderr
    assert "environment.path" in checked.stderr and "env_wrappers[0]" in checked.stderr
    assert "allowed by --trust-code" in checked.stderr
    dry = train(f"manifest={manifest}", "dry_run=true")
    assert dry.returncode == 0 and "note: environment.env_wrappers[0]" in dry.stderr
    assert REPO.exists()
