"""Without an extra: plain runs and sweeps work, quietly; what needs a missing extra (a
launcher, a sweeper, a paradigm's packages) is refused with exit 2, naming the extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# train.py, with the slurm extra's packages made unimportable
BLOCKED = """
import runpy, sys
from importlib.abc import MetaPathFinder

BLOCK = BLOCKED_NAMES

class Block(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK or name.startswith("hydra_plugins.hydra_submitit_launcher"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
sys.argv = [sys.argv[0], *sys.argv[1:]]
runpy.run_path(TRAIN, run_name="__main__")
"""


def _train(
    tmp_path: Path, *args: str, blocked: tuple[str, ...] = ("submitit", "optuna")
) -> subprocess.CompletedProcess:
    code = BLOCKED.replace("TRAIN", repr(str(REPO / "train.py")))
    code = code.replace("BLOCKED_NAMES", repr(blocked))
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_sweep_runs_without_the_extra_and_hydra_warns_of_no_plugin(tmp_path: Path) -> None:
    done = _train(
        tmp_path, "-m", "seed=0,1", "training=smoke", "training.max_steps=512",
        "training.evo_steps=512", "logger.tensorboard=false",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Error importing" not in done.stderr and "UserWarning" not in done.stderr
    assert len(list((tmp_path / "multirun").glob("*/*/*/summary.json"))) == 2


@pytest.mark.parametrize(
    ("arg", "module"),
    [
        ("hydra/launcher=local", "hydra_plugins.hydra_submitit_launcher"),
        ("hydra/launcher=slurm_cpu", "hydra_plugins.hydra_submitit_launcher"),
        ("hydra/sweeper=optuna", "optuna"),
    ],
)
def test_an_option_needing_the_extra_is_refused_naming_it(
    tmp_path: Path, arg: str, module: str
) -> None:
    done = _train(tmp_path, "-m", arg, "seed=0,1", "training=smoke")
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"{arg} needs the slurm extra ({module} is not installed)" in done.stderr
    assert 'pip install -e ".[slurm]"' in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "multirun").exists()


@pytest.mark.parametrize(
    ("args", "package", "extra", "what"),
    [
        (
            ("algorithm=ippo", "env=mpe_simple_spread", "training=smoke"),
            "pettingzoo",
            "multiagent",
            "IPPO",
        ),
        (
            ("algorithm=neural_ucb", "env=iris_bandit", "training=smoke"),
            "sklearn",
            "bandits",
            "NeuralUCB on",
        ),
        (("experiment=sft_chat",), "transformers", "llm", "SFT"),
        (("logger=wandb", "training=smoke"), "wandb", "wandb", "logger=wandb"),
    ],
)
def test_a_paradigm_without_its_extra_exits_2_naming_it_and_leaves_no_run_dir(
    tmp_path: Path, args: tuple[str, ...], package: str, extra: str, what: str
) -> None:
    done = _train(tmp_path, *args, blocked=(package,))
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"needs the {extra} extra ({package} is not installed)" in done.stderr
    assert what in done.stderr and f'pip install -e ".[{extra}]"' in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


def test_the_stand_in_launcher_base_names_the_extra(monkeypatch) -> None:
    """What a Python caller gets from a submitit launcher when the extra is missing."""
    import importlib

    import hydra_plugins.agilerl_plugins.launchers as launchers
    from agilerl.arena.models.errors import ConfigError

    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_submitit_launcher", None)
    monkeypatch.setitem(
        sys.modules, "hydra_plugins.hydra_submitit_launcher.submitit_launcher", None
    )
    try:
        stripped = importlib.reload(launchers)
        with pytest.raises(ConfigError, match=r"needs the slurm extra .* pip install"):
            stripped.ValidatingLocalLauncher()
    finally:
        monkeypatch.undo()
        importlib.reload(launchers)


def test_agilerl_algorithms_lists_every_algorithm_and_the_extra_it_needs(tmp_path: Path) -> None:
    code = BLOCKED.replace('runpy.run_path(TRAIN, run_name="__main__")', "")
    code = code.replace("BLOCKED_NAMES", repr(("pettingzoo", "transformers")))
    code += "from agilerl.cli import main; sys.exit(main(['algorithms']))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "240"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if "│" in line}
    assert "needs the multiagent extra" in rows["MATD3"]
    assert "needs the llm extra" in rows["GRPO"] and "needs the llm extra" in rows["SFT"]
    assert "│ yes" in rows["PPO"]
