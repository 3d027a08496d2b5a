"""Every conf/experiment preset: trained for a few steps if its paradigm trains, else refused.

Whether an experiment trains is read from its strategy (``trainable``), so a
paradigm that lands in a later version is smoke-trained here without editing
this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agilerl.launch.compose import build_manifest
from agilerl.trainer import LocalTrainer

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
SMOKE = ("training.max_steps=512", "training.evo_steps=256", "training.pop_size=1")
# Episode evaluation (RL paradigms; an LLM run refuses these fields, it does not read them)
RL_EVAL_SMOKE = ("training.eval_steps=50", "training.eval_loop=1")


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


# A rollout step is a round of generation (batch_size prompts x group_size completions);
# the smoke budget of rollout presets is a couple of short rounds.
ROLLOUT_SMOKE = (
    "training.max_steps=2",
    "training.evo_steps=2",
    "algorithm.batch_size=2",
    "algorithm.max_output_tokens=8",
)


# IPPO trains on whole rollouts of learn_step env steps: one must fit in the smoke budget
ON_POLICY_MULTI_AGENT_SMOKE = ("algorithm.learn_step=256",)


def _smoke(experiment: str) -> tuple[str, ...]:
    text = (CONF / "experiment" / f"{experiment}.yaml").read_text()
    envs = [line.split(":", 1)[1].strip() for line in text.splitlines() if "override /env:" in line]
    rollout = [e for e in envs if "env_type: rollout" in (CONF / "env" / f"{e}.yaml").read_text()]
    if "override /algorithm: ippo" in text:
        return SMOKE + RL_EVAL_SMOKE + ON_POLICY_MULTI_AGENT_SMOKE
    if "llm_lora" not in text:
        return SMOKE + RL_EVAL_SMOKE
    if not rollout:
        return SMOKE
    budget = ("training.max_steps=", "training.evo_steps=")
    return tuple(o for o in SMOKE if not o.startswith(budget)) + ROLLOUT_SMOKE


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_trains(
    compose, tmp_path: Path, experiment: str, request: pytest.FixtureRequest
) -> None:
    model = _model_override(experiment, request)
    manifest, _ = build_manifest(compose(f"experiment={experiment}", *_smoke(experiment), *model))
    # the shipped presets' code (e.g. the countdown reward file) is the repository's own
    trainer = LocalTrainer.from_manifest(
        manifest, run_dir=tmp_path / "run", verbose=False, trust_code=True
    )
    population, fitnesses = trainer.train()
    assert len(population) == 1 and len(fitnesses) == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["total_steps"] > 0  # it trained: a run that did nothing says completed too
