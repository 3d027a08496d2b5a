"""Private torch APIs live in one module, used only on the torch versions it knows."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agilerl.networks import torch_internals

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "agilerl"


@pytest.mark.parametrize(
    ("version", "known"),
    [
        ("2.13.0+cpu", True),
        ("2.3.1", True),
        ("2.8.0a0+git1234", True),
        ("2.2.2", False),
        ("2.14.0", False),
        ("3.0.0", False),
        ("nightly", False),
    ],
)
def test_only_tested_torch_versions_take_the_private_paths(version: str, known: bool) -> None:
    assert torch_internals.supported(version) is known


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


PRIVATE_ATTRIBUTES = ("_version", "_execution_engine", "_get_fsdp_state", "_lazy_init")


def _private_uses(path: Path) -> list[str]:
    """``torch._x``, ``torch.ops``, ``._version``, ``_execution_engine`` in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        text = _dotted(node) or ""
        parts = text.split(".")
        private_torch = parts[0] == "torch" and any(p.startswith("_") for p in parts[1:])
        torch_ops = parts[:2] == ["torch", "ops"]
        if private_torch or torch_ops or node.attr in PRIVATE_ATTRIBUTES:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_torch_internals_touches_private_torch_apis() -> None:
    uses = [
        use
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "torch_internals.py"
        for use in _private_uses(path)
    ]
    assert not uses, "use agilerl.networks.torch_internals instead:\n" + "\n".join(uses)
    assert _private_uses(PACKAGE / "networks" / "torch_internals.py")  # the scan finds them


def train_three() -> dict:
    """Pop-2 runs of PPO, DQN and TD3 and what this process's torch internals allow."""
    from agilerl.networks import fastgrad
    from agilerl.trainer import LocalTrainer

    out = {
        "fast_paths": torch_internals.FAST_PATHS,
        "fused_adam": torch_internals.FUSED_ADAM,
        "reason": torch_internals.unsupported_reason(),
        "tape_fast": fastgrad.GradTape().fast,
    }
    for name, env in (("PPO", "CartPole-v1"), ("DQN", "CartPole-v1"), ("TD3", "Pendulum-v1")):
        training = {"max_steps": 256, "evo_steps": 256, "pop_size": 2}
        if name != "PPO":  # a shared buffer fills in another order when batched
            training = {"max_steps": 128, "evo_steps": 128, "pop_size": 2,
                        "learning_delay": 0, "experience_sharing": False}  # fmt: skip
        trainer = LocalTrainer(
            {"name": name, "learn_step": 64 if name == "PPO" else 4, "batch_size": 32},
            env,
            training,
            seed=1,
            verbose=False,
            presets=False,
        )
        population, _ = trainer.train()
        out[name] = [p.detach().double().sum().item() for p in population[1].actor.parameters()]
    return out


UNKNOWN_TORCH = """
import json, sys, warnings
import torch
torch.__version__ = "2.99.0"  # a release the fast paths were never tested on
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
from test_torch_internals import train_three
print(json.dumps(train_three()))
"""


@pytest.mark.slow  # a second interpreter and six short runs: ~10 s
@pytest.mark.filterwarnings("ignore:.*has no replay_buffer section")
def test_an_unknown_torch_trains_on_public_apis_with_the_same_results() -> None:
    known = train_three()
    done = subprocess.run(
        [sys.executable, "-c", UNKNOWN_TORCH, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    unknown = json.loads(done.stdout.strip().splitlines()[-1])
    assert known["fast_paths"] and known["tape_fast"] and known["reason"] is None
    assert not unknown["fast_paths"] and not unknown["fused_adam"] and not unknown["tape_fast"]
    assert "2.99.0" in unknown["reason"]
    for name in ("PPO", "DQN", "TD3"):  # populations of 2: batched here, one by one there
        assert unknown[name] == pytest.approx(known[name], rel=1e-4, abs=1e-5), name
