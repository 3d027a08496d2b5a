"""Which tests need which optional extra, so that ``.[dev]`` alone runs a clean suite.

The README's quick start installs ``.[dev]`` and runs the tests. Tests of a
paradigm whose extra is not installed are skipped (with the extra named), not
failed: whole modules are left out of collection (their imports need the
extra), and parametrized cases that name such a paradigm are skipped. With
every extra installed (CI) nothing here skips anything.
"""

from __future__ import annotations

import importlib.util
import re

EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "multiagent": ("pettingzoo", "mpe2"),
    "bandits": ("sklearn", "pandas", "pyarrow"),
    "offline": ("h5py", "minari"),
    "llm": ("transformers", "peft"),
    "export": ("onnx", "onnxscript", "onnxruntime"),
    "atari": ("ale_py", "minatar", "cv2"),
    "gem": ("gem",),
}
"""Extra -> the packages its tests import (see pyproject.toml)."""

MODULES: dict[str, tuple[str, ...]] = {
    "multiagent": (
        "algorithms_ma/*.py",
        "envs/test_pettingzoo.py",
        "training/test_evaluate_multi_agent.py",
        "training/test_multi_agent_resume.py",
        "deploy/test_load_multi_agent.py",
        "envs/test_classic.py",
        "algorithms/test_masked_learning.py",
    ),
    "bandits": ("envs/test_bandits.py", "algorithms_offline/test_neural_bandits.py"),
    "offline": ("envs/test_offline.py", "algorithms_offline/test_cqn.py"),
    "atari": ("envs/test_images.py", "algorithms/test_minatar_learning.py"),
}
"""Extra -> test modules (globs under tests/) that are about its paradigm alone."""

CASES: dict[str, re.Pattern[str]] = {
    "multiagent": re.compile(r"\b(IPPO|MADDPG|MATD3)\b|ippo_|maddpg_|matd3_|mpe_"),
    "bandits": re.compile(r"\b(NeuralUCB|NeuralTS)\b|neural_ucb|neural_ts|iris_bandit"),
    "llm": re.compile(r"make_tiny_llm|\b(GRPO|GSPO|CISPO|SFT|DPO|LLMPPO|LLMREINFORCE)\b"),
    "export": re.compile(r"\bonnx\b"),
    "atari": re.compile(r"train\.py .*env=(pong|breakout|minatar_)"),  # README runs of them
    "gem": re.compile(r"gem_"),
}
"""Extra -> a pattern of the parametrization ids (algorithm, preset, command) that need it."""


def missing_extras() -> set[str]:
    """The extras whose packages are not all importable here."""
    return {
        extra
        for extra, packages in EXTRA_PACKAGES.items()
        if any(importlib.util.find_spec(p) is None for p in packages)
    }


def ignored_modules(missing: set[str]) -> list[str]:
    """Globs (relative to tests/) of the modules to leave out of collection."""
    return [glob for extra in sorted(missing) for glob in MODULES.get(extra, ())]


def needed_extra(case_id: str, missing: set[str]) -> str | None:
    """The missing extra a parametrized case (``[...]`` of its node id) needs, if any."""
    for extra in sorted(missing):
        pattern = CASES.get(extra)
        if pattern is not None and pattern.search(case_id):
            return extra
    return None
