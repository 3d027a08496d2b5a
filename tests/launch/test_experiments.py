"""Every conf/experiment preset trains with ``training=smoke``: the preset's budget gives way.

Whether an experiment trains is read from its strategy (``trainable``), so a
paradigm that lands in a later version is smoke-trained here without editing
this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agilerl.launch.compose import build_manifest
from agilerl.strategies import select_strategy
from agilerl.trainer import LocalTrainer

CONF = Path(__file__).resolve().parents[2] / "conf"
HEAVY = {"dpo_preference", "grpo_countdown"}
"""Presets whose smoke run takes over 10 s on 2 cores: they run with the slow suite."""
EXPERIMENTS = [
    pytest.param(p.stem, marks=pytest.mark.slow) if p.stem in HEAVY else p.stem
    for p in sorted((CONF / "experiment").glob("*.yaml"))
]


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny local causal LM the LLM presets fine-tune (built offline)."""
    pytest.importorskip("transformers")
    from agilerl.llm.tiny import build_tiny_llm

    return build_tiny_llm(tmp_path_factory.mktemp("tiny-llm") / "model")


def _model_override(experiment: str, request: pytest.FixtureRequest) -> tuple[str, ...]:
    text = (CONF / "experiment" / f"{experiment}.yaml").read_text()
    if "llm_lora" not in text:
        return ()
    return (f"network.pretrained_model_name_or_path={request.getfixturevalue('tiny_llm')}",)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_trains(
    compose, tmp_path: Path, experiment: str, request: pytest.FixtureRequest
) -> None:
    model = _model_override(experiment, request)
    manifest, _ = build_manifest(compose(f"experiment={experiment}", "training=smoke", *model))
    smoke = select_strategy(manifest.algorithm).smoke_budget
    assert manifest.training.max_steps == smoke["max_steps"]  # the preset's budget gave way
    # the shipped presets' code (e.g. the countdown reward file) is the repository's own
    trainer = LocalTrainer.from_manifest(
        manifest, run_dir=tmp_path / "run", verbose=False, trust_code=True
    )
    population, fitnesses = trainer.train()
    assert len(population) == 1 and len(fitnesses) == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert 0 < summary["total_steps"] <= smoke["max_steps"] + 2048  # at most one rollout over
