"""A population of LoRA adapters on one base model, and evolutionary HPO over lr and beta."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agilerl.arena.models.hpo import MutationSpec
from agilerl.arena.models.training import TrainingSpec
from agilerl.builders.llm import population_on_one_base
from agilerl.hpo import Mutations, TournamentSelection
from agilerl.hpo.evolution import Evolution
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


def _operators(spec, size: int, **probabilities: float) -> tuple[Any, Any]:
    """The trainer's operators for ``spec``: plain tournaments with elitism, the given weights."""
    weights = {"no_mut": 0.0, "arch_mut": 0.0, "params_mut": 0.0, "rl_hp_mut": 0.0}
    mutation = MutationSpec(probabilities={**weights, **probabilities})
    tournament = TournamentSelection(2, True, size, rng=np.random.default_rng(0))
    return tournament, Mutations.from_spec(mutation, spec, rng_seed=1)


def test_evolution_copies_winners_and_mutates_by_the_spec_factors(make_spec, tokenizer) -> None:
    spec = make_spec("DPO", beta=0.05, lr=5e-4)  # inside the ranges declared on the fields
    population = population_on_one_base(spec, tokenizer, 4)
    with torch.no_grad():
        for i, agent in enumerate(population):
            for p in agent.trainable_parameters():
                p.fill_(float(i))
            agent.fitness = [[0.0, 3.0, 1.0, 2.0][i]]
    states = [_adapters(a) for a in population]
    evolution = Evolution(*_operators(spec, 4, rl_hp_mut=1.0))
    _, rows = evolution.evolve_in_place(population, generation=1, step=10)
    # the elite (slot 1) stays where it is, unchanged
    assert rows[1]["parent"] == 1 and rows[1]["elite"] and rows[1]["mutation"] == "None"
    assert population[1].spec.lr == 5e-4 and population[1].spec.beta == 0.05
    ranges = type(spec).mutation_ranges()
    for slot, row in enumerate(rows):
        agent = population[slot]
        assert row["index"] == agent.index == slot
        assert all(torch.equal(v, states[row["parent"]][k]) for k, v in _adapters(agent).items())
        assert agent.optimizer.param_groups[0]["lr"] == agent.spec.lr
        if slot == 1:
            continue
        assert row["mutation"] == "rl_hp"
        name = "lr" if agent.spec.lr != 5e-4 else "beta"
        old = 5e-4 if name == "lr" else 0.05
        factors = {ranges[name].grow, ranges[name].shrink}
        assert any(getattr(agent.spec, name) == pytest.approx(old * f) for f in factors)


def test_no_mut_changes_no_hyperparameter(make_spec, tokenizer) -> None:
    spec = make_spec("DPO", beta=0.005)
    population = population_on_one_base(spec, tokenizer, 3)
    for i, agent in enumerate(population):
        agent.fitness = [float(i)]
    evolution = Evolution(*_operators(spec, 3, no_mut=1.0))
    for generation in range(3):
        _, rows = evolution.evolve_in_place(population, generation=generation, step=generation)
        assert {row["mutation"] for row in rows} == {"None"}
    assert all(agent.spec == spec for agent in population)


def test_hpo_run_writes_lineage(tmp_path: Path, make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    env.train.rows, env.test.rows = env.train.rows[:8], env.test.rows[:4]
    population = population_on_one_base(make_spec("DPO", batch_size=4, beta=0.005), tokenizer, 2)
    tournament, mutation = _operators(population[0].spec, 2, rl_hp_mut=1.0)
    train_llm_dataset(
        population,
        env,
        training=TrainingSpec(max_steps=3, evaluation_interval=1),
        tournament=tournament,
        mutation=mutation,
        run_dir=tmp_path,
    )
    rows = (tmp_path / "hpo.csv").read_text().splitlines()
    # the same lineage columns as every RL run: two evolutions of two members
    assert rows[0].startswith("generation,step,index,parent,elite,parent_fitness,mutation,detail")
    assert len(rows) == 5 and "hp_lr" in rows[0] and "hp_beta" in rows[0]
    # checkpoints are named by the population's steps: 3 batches of 2 members
    assert (tmp_path / "checkpoints" / "step_000000000006" / "adapter_1").is_dir()


@pytest.mark.parametrize(
    "evo_epochs",
    [pytest.param(None, marks=pytest.mark.slow), 1],  # None: every evaluation
)
def test_evo_epochs_evolves_once_per_that_many_passes(
    tmp_path: Path, make_spec, make_env, tokenizer, evo_epochs: int | None
) -> None:
    env = make_env("preference")
    env.train.rows, env.test.rows = env.train.rows[:8], env.test.rows[:4]  # 2 batches a pass
    population = population_on_one_base(make_spec("DPO", batch_size=4, beta=0.005), tokenizer, 2)
    tournament, mutation = _operators(population[0].spec, 2, rl_hp_mut=1.0)
    train_llm_dataset(
        population,
        env,
        training=TrainingSpec(num_epochs=3, evo_epochs=evo_epochs, evaluation_interval=1),
        tournament=tournament,
        mutation=mutation,
        run_dir=tmp_path,
    )
    rows = (tmp_path / "hpo.csv").read_text().splitlines()[1:]
    steps = sorted({int(row.split(",")[1]) for row in rows})
    # at every evaluation (each batch of 2 members) but the last, or after each pass
    # (2 batches of 2 members) but the last
    assert steps == (list(range(2, 12, 2)) if evo_epochs is None else [4, 8])


@pytest.mark.slow
def test_hpo_run_resumes_exactly(tmp_path: Path, make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    env.train.rows, env.test.rows = env.train.rows[:16], env.test.rows[:8]
    spec = make_spec("DPO", batch_size=4, beta=0.005)
    training = TrainingSpec(max_steps=4, evaluation_interval=2)
    straight = population_on_one_base(spec, tokenizer, 2)
    ops = dict(zip(("tournament", "mutation"), _operators(spec, 2, rl_hp_mut=1.0), strict=True))
    _, fit_a = train_llm_dataset(straight, env, run_dir=tmp_path / "a", training=training, **ops)
    first = population_on_one_base(spec, tokenizer, 2)
    ops = dict(zip(("tournament", "mutation"), _operators(spec, 2, rl_hp_mut=1.0), strict=True))
    train_llm_dataset(first, env, run_dir=tmp_path / "b", stop_after=3, training=training, **ops)
    resumed = population_on_one_base(spec, tokenizer, 2)
    # the operators' states come back with the checkpoint when the trainer resumes; here the
    # one evolution (step 2) happens before the stop and is replayed from the weights alone
    ops = dict(zip(("tournament", "mutation"), _operators(spec, 2, rl_hp_mut=1.0), strict=True))
    _, fit_b = train_llm_dataset(
        resumed, env, run_dir=tmp_path / "b", resume=True, training=training, **ops
    )
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


def test_parameter_noise_perturbs_only_the_members_own_adapter(make_spec, tokenizer) -> None:
    spec = make_spec("SFT")
    population = population_on_one_base(spec, tokenizer, 3)
    for i, agent in enumerate(population):
        agent.fitness = [float(i)]
    before = [_adapters(a) for a in population]
    evolution = Evolution(*_operators(spec, 3, params_mut=1.0))
    _, rows = evolution.evolve_in_place(population, generation=0, step=0)
    assert [r["mutation"] for r in rows] == ["param", "param", "None"]
    assert all(r["detail"].startswith("adapter: ") for r in rows[:2])
    after = [_adapters(a) for a in population]
    # slot 2 is the elite, unchanged; the others are noisy copies of their parents
    assert all(torch.equal(after[2][k], before[2][k]) for k in before[2])
    for slot in (0, 1):
        parent = before[rows[slot]["parent"]]
        assert not all(torch.equal(after[slot][k], parent[k]) for k in parent)
    assert all(agent.spec == spec for agent in population)
