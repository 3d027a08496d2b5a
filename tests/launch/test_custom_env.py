"""Your own env through ``train.py``: its own run name, no other env's tuned preset.

Runs ``train.py`` in a fresh folder holding the README's ``my_envs.py`` (the "Your own
environment" section), or with it installed as a package on the import path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHORT = ("training.max_steps=2048", "training.evo_steps=1024", "training.eval_steps=100")
sys.path.insert(0, str(REPO / "scripts"))
from readme_commands import code_blocks  # noqa: E402


def readme_module() -> str:
    """The README's ``my_envs.py``: an env class, ``make`` and a registration on import."""
    (code,) = [
        body
        for lang, body in code_blocks((REPO / "README.md").read_text())
        if lang == "python" and body.startswith("# my_envs.py")
    ]
    return code


def _train(cwd: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env=env,
    )


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "my_envs.py").write_text(readme_module())
    return tmp_path


def _only_run(cwd: Path) -> Path:
    (run,) = (cwd / "runs").glob("*/*")
    return run


def test_an_entrypoint_env_trains_under_its_own_name_without_a_preset(user_dir: Path) -> None:
    done = _train(
        user_dir,
        "algorithm=ppo",
        "env=custom",
        "environment.name=WalkRight-v0",
        "environment.entrypoint=my_envs:make",
        "environment.path=.",
        "trust_code=true",
        *SHORT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = _only_run(user_dir)
    assert "_ppo_walkright-v0_" in run.name  # not named after a shipped env group
    manifest = yaml.safe_load((run / "manifest.yaml").read_text())
    from agilerl.arena.models.algorithms import PPOSpec

    # no conf/tuned/ preset: the spec's defaults (not those tuned for a shipped env)
    assert manifest["algorithm"]["lr"] == PPOSpec.model_fields["lr"].default
    assert manifest["algorithm"]["update_epochs"] == PPOSpec.model_fields["update_epochs"].default
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env"] == "WalkRight-v0" and summary["total_steps"] >= 2048
    assert summary["status"] == "completed" and summary["best_fitness"] is not None


@pytest.mark.slow  # three train.py processes (~10 s)
def test_an_id_registered_by_another_module_trains_with_trust_code(user_dir: Path) -> None:
    args = ("algorithm=ppo", "env=custom", "environment.name=my_envs:WalkRight-v0", *SHORT)
    missing = _train(user_dir, *args, "trust_code=true")  # the folder is not on the path
    assert missing.returncode == 2 and "environment.path" in missing.stderr, missing.stderr
    args = (*args, "environment.path=.")
    refused = _train(user_dir, *args)
    assert refused.returncode == 2 and "trust_code" in refused.stderr, refused.stderr[-2000:]
    assert not (user_dir / "runs").exists()
    done = _train(user_dir, *args, "trust_code=true")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((_only_run(user_dir) / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] >= 2048


def test_an_id_an_installed_package_registers_trains_with_trust_code(tmp_path: Path) -> None:
    """A package importable from the environment (here on PYTHONPATH, as ``pip install``
    would leave it) registers its id when imported: ``<package>:<id>``, no environment.path."""
    site = tmp_path / "site"
    (site / "walk_envs").mkdir(parents=True)
    (site / "walk_envs" / "__init__.py").write_text(readme_module())
    cwd = tmp_path / "work"
    cwd.mkdir()
    args = ("algorithm=ppo", "env=custom", "environment.name=walk_envs:WalkRight-v0", *SHORT)
    refused = _train(cwd, *args, pythonpath=site)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "environment.name: 'walk_envs:WalkRight-v0' runs code" in refused.stderr
    assert "trust_code=true" in refused.stderr and "Traceback" not in refused.stderr
    assert not (cwd / "runs").exists()
    done = _train(cwd, *args, "trust_code=true", pythonpath=site)
    assert done.returncode == 0, done.stderr[-2000:]
    run = _only_run(cwd)
    assert "_ppo_walk_envs_walkright-v0_" in run.name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env"] == "walk_envs:WalkRight-v0"
    assert summary["status"] == "completed" and summary["total_steps"] >= 2048


def test_a_preset_is_not_applied_to_an_env_it_was_not_tuned_on(tmp_path: Path) -> None:
    done = _train(tmp_path, "algorithm=ppo", "env=cartpole", "environment.name=Acrobot-v1")
    assert done.returncode == 2
    assert "tuned preset for CartPole-v1" in done.stderr and "env=custom" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
