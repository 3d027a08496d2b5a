"""A population of LoRA adapters on one base model, and evolutionary HPO over lr and beta."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agilerl.llm.evolution import evolve_population, population_on_one_base
from agilerl.training.llm.train_llm_dataset import train_llm_dataset

pytestmark = pytest.mark.llm


def _adapters(agent) -> dict[str, torch.Tensor]:
    return agent.trainable_state()


def test_agents_share_the_base_and_train_only_their_own_adapter(
    make_spec, make_env, tokenizer
) -> None:
    env = make_env("preference")
    population = population_on_one_base(make_spec("DPO", batch_size=4), tokenizer, 3)
    assert all(agent.actor is population[0].actor for agent in population)
    assert [a.adapter_name for a in population] == ["default", "agent_1", "agent_2"]
    before = [_adapters(a) for a in population]
    population[1].learn(env.train.rows[:4], env)
    after = [_adapters(a) for a in population]
    for i in (0, 2):
        assert all(torch.equal(before[i][k], after[i][k]) for k in before[i])
    assert not all(torch.equal(before[1][k], after[1][k]) for k in before[1])
    # Agent 0's forward pass uses agent 0's adapter, not the last one trained.
    metrics = [a.evaluate(env.test.rows[:8], env) for a in population]
    assert metrics[0]["reward_margin"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[1]["reward_margin"] != pytest.approx(0.0, abs=1e-6)


def test_evolution_copies_winners_and_mutates_within_ranges(make_spec, tokenizer) -> None:
    population = population_on_one_base(make_spec("DPO", beta=0.005), tokenizer, 4)
    with torch.no_grad():
        for i, agent in enumerate(population):
            for p in agent.trainable_parameters():
                p.fill_(float(i))
    states = [_adapters(a) for a in population]
    lineage = evolve_population(population, [0.0, 3.0, 1.0, 2.0], seed=0)
    assert lineage[0]["parent"] == 1 and lineage[0]["mutation"] is None
    assert population[0].spec.lr == 3e-3 and population[0].spec.beta == 0.005
    ranges = population[0].spec.hpo_ranges
    for slot, row in enumerate(lineage):
        agent = population[slot]
        assert agent.index == slot and agent.adapter_name == population[slot].adapter_name
        assert all(torch.equal(v, states[row["parent"]][k]) for k, v in _adapters(agent).items())
        for name in ("lr", "beta"):
            low, high = ranges[name][:2]
            assert low <= getattr(agent.spec, name) <= high
        assert agent.optimizer.param_groups[0]["lr"] == agent.spec.lr
    mutated = [row for row in lineage[1:] if row["lr"] != 3e-3 or row["beta"] != 0.005]
    assert len(mutated) == 3


def test_hpo_run_writes_lineage(tmp_path: Path, make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    env.train.rows, env.test.rows = env.train.rows[:8], env.test.rows[:4]
    population = population_on_one_base(make_spec("DPO", batch_size=4, beta=0.005), tokenizer, 2)
    train_llm_dataset(
        population,
        env,
        max_steps=2,
        num_epochs=None,
        evaluation_interval=1,
        hpo=True,
        run_dir=tmp_path,
    )
    rows = (tmp_path / "hpo.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("step,slot,parent,mutation")
    assert (tmp_path / "checkpoints" / "step_000000000002" / "adapter_1").is_dir()


@pytest.mark.slow
def test_hpo_run_resumes_exactly(tmp_path: Path, make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    env.train.rows, env.test.rows = env.train.rows[:16], env.test.rows[:8]
    spec = make_spec("DPO", batch_size=4, beta=0.005)
    kwargs = {"max_steps": 4, "num_epochs": None, "evaluation_interval": 2, "hpo": True}
    straight = population_on_one_base(spec, tokenizer, 2)
    _, fit_a = train_llm_dataset(straight, env, run_dir=tmp_path / "a", **kwargs)
    first = population_on_one_base(spec, tokenizer, 2)
    train_llm_dataset(first, env, run_dir=tmp_path / "b", stop_after=3, **kwargs)
    resumed = population_on_one_base(spec, tokenizer, 2)
    _, fit_b = train_llm_dataset(resumed, env, run_dir=tmp_path / "b", resume=True, **kwargs)
    assert fit_a == fit_b
    assert [a.spec for a in straight] == [a.spec for a in resumed]
    a, b = straight[1].trainable_state(), resumed[1].trainable_state()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_clone_takes_its_own_adapter_on_the_same_base(make_spec, make_env, tokenizer) -> None:
    from agilerl.builders.llm import LLMBuilder

    env = make_env("sft")
    agent = LLMBuilder.build(make_spec("SFT", batch_size=4), tokenizer=tokenizer)
    agent.learn(env.train.rows[:4], env)
    twin = agent.clone(index=1)
    assert twin.actor is agent.actor and twin.adapter_name == "agent_1"
    assert twin.num_updates == agent.num_updates == 1
    a, b = agent.trainable_state(), twin.trainable_state()
    assert all(torch.equal(a[k], b[k]) for k in a)
    twin.learn(env.train.rows[4:8], env)
    assert all(torch.equal(a[k], agent.trainable_state()[k]) for k in a)
    assert agent.evaluate(env.test.rows[:4], env) != twin.evaluate(env.test.rows[:4], env)
    with pytest.raises(ValueError, match="another population index"):
        agent.clone()
