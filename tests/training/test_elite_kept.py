"""Evolutionary HPO keeps the elite unchanged: selection clones it, mutation leaves it alone."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from agilerl.arena.models import TrainingManifest
from agilerl.arena.models.hpo import MutationSpec
from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.hpo import Mutations, TournamentSelection

SMALL_PPO = {
    "algorithm": {"name": "PPO", "learn_step": 64, "batch_size": 32},
    "environment": {"name": "CartPole-v1", "num_envs": 1},
    "network": {
        "latent_dim": 16,
        "encoder_config": {"arch": "mlp", "hidden_size": [16]},
        "head_config": {"hidden_size": [16]},
    },
    "training": {"pop_size": 3, "hpo": True, "max_steps": 1000, "evo_steps": 500},
    "mutation": {"probabilities": {"no_mut": 0.0, "params_mut": 1.0}},
}


def _weights(agent: object) -> dict[str, torch.Tensor]:
    state = agent.state_dict()  # type: ignore[attr-defined]
    return {
        f"{name}.{key}": tensor.clone()
        for name, net in state["networks"].items()
        for key, tensor in net.items()
    }


def test_default_mutation_spec_keeps_the_elite() -> None:
    assert MutationSpec().mutate_elite is False


def test_elite_is_never_mutated_even_when_every_other_member_is() -> None:
    torch.manual_seed(0)
    manifest = TrainingManifest.from_dict(SMALL_PPO)
    spec = manifest.algorithm_with_network()
    env = gym.make("CartPole-v1")
    population = [
        select_builder(spec).build(
            spec,
            env.observation_space,
            env.action_space,
            runtime=AlgorithmBuildRuntime(index=i, device="cpu", total_steps=1000),
        )
        for i in range(3)
    ]
    for agent, fitness in zip(population, (10.0, 50.0, 20.0), strict=True):
        agent.fitness.append(fitness)
    best = _weights(population[1])
    tournament = TournamentSelection(2, True, 3, rng=np.random.default_rng(0))
    mutation = Mutations.from_spec(manifest.mutation, spec, rng_seed=1)
    _elite, selected, lineage = tournament.select(population)
    mutated = mutation.mutation(selected)

    assert lineage[0] == {"index": 1, "parent": 1, "elite": True}
    assert mutation.last_records[0]["mutation"] == "None"
    assert all(r["mutation"] == "param" for r in mutation.last_records[1:])
    after = _weights(mutated[0])
    assert all(torch.equal(after[k], best[k]) for k in best)
    parents = {int(a.index): _weights(a) for a in population}
    for member, link in zip(mutated[1:], lineage[1:], strict=True):
        changed, parent = _weights(member), parents[link["parent"]]
        assert any(not torch.equal(changed[k], parent[k]) for k in parent)
