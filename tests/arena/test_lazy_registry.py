"""The registry names every algorithm up front and imports a spec module when it is used."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from agilerl.arena.models import algorithms
from agilerl.arena.models.registry import MANIFEST_REGISTRY, AlgorithmRegistry

REPO = Path(__file__).resolve().parents[2]


def test_every_declared_name_and_class_lives_where_the_tables_say() -> None:
    for name, module in algorithms._REGISTERED_BY.items():
        assert MANIFEST_REGISTRY.get(name).__module__ == f"{algorithms.__name__}.{module}", name
    for cls_name, module in algorithms._SPEC_MODULES.items():
        cls = getattr(algorithms, cls_name)
        assert cls.__module__ == f"{algorithms.__name__}.{module}", cls_name
        assert cls_name in algorithms.__all__


def test_validating_a_manifest_imports_only_its_algorithm() -> None:
    code = (
        "import sys\n"
        "from agilerl.arena.models.manifest import TrainingManifest\n"
        "from agilerl.arena.models.registry import MANIFEST_REGISTRY\n"
        f"TrainingManifest.from_file({str(REPO / 'tests/manifests/dqn_lunar_lander.yaml')!r})\n"
        "assert 'SAC' in MANIFEST_REGISTRY and len(MANIFEST_REGISTRY.names()) >= 20\n"
        "prefix = 'agilerl.arena.models.algorithms.'\n"
        "print(sorted(m[len(prefix):] for m in sys.modules if m.startswith(prefix)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = ast.literal_eval(done.stdout)
    assert "dqn" in loaded
    assert not {"sac", "td3", "grpo", "maddpg", "sft"} & set(loaded)


def test_a_lazy_name_is_loaded_once_and_an_eager_one_wins() -> None:
    registry = AlgorithmRegistry()
    registry.add_lazy("DQN", "agilerl.arena.models.algorithms.dqn")
    registry.add_lazy("Broken", "agilerl.arena.models.algorithms.base")
    assert "DQN" in registry and registry.names() == ["Broken", "DQN"]
    # the module registers into MANIFEST_REGISTRY, not this one: the mismatch is reported
    try:
        registry.get("Broken")
    except ImportError as exc:
        assert "expected to register algorithm 'Broken'" in str(exc)
    else:
        raise AssertionError("a module that does not register its name must fail loudly")
    spec_cls = MANIFEST_REGISTRY.get("DQN")
    registry.add("DQN", spec_cls)
    registry.add_lazy("DQN", "no.such.module")  # already registered: nothing to load
    assert registry.get("DQN") is spec_cls
