"""Evolutionary HPO for a population of LoRA adapters on one base model.

Each generation keeps the fittest agent unchanged (elitism); every other slot
copies the adapter, optimizer state and hyperparameters of a tournament
winner (two agents drawn at random, the fitter wins) and then mutates one
hyperparameter (``lr``, and ``beta`` for DPO) by the grow or shrink factor of
the spec's ``hpo_ranges``, clipped to its bounds. The base model is shared:
only adapters are copied.
"""

from __future__ import annotations

import copy
import random
from typing import Any


def population_on_one_base(
    spec: Any, tokenizer: Any, size: int, *, device: str = "cpu", builder: Any = None
) -> list[Any]:
    """``size`` agents whose adapters sit on one shared base model.

    Args:
        spec: The algorithm spec (every agent starts from it).
        tokenizer: The model's tokenizer.
        size: Population size.
        device: Torch device.
        builder: The builder class (default :class:`~agilerl.builders.llm.LLMBuilder`).
    """
    from agilerl.builders.runtime import AlgorithmBuildRuntime

    if builder is None:
        from agilerl.builders.llm import LLMBuilder as builder
    first = builder.build(spec, tokenizer=tokenizer, runtime=AlgorithmBuildRuntime(0, device))
    rest = [
        builder.build(
            spec,
            tokenizer=tokenizer,
            runtime=AlgorithmBuildRuntime(i, device),
            actor_network=first.actor,
        )
        for i in range(1, size)
    ]
    return [first, *rest]


def mutate(agent: Any, rng: random.Random) -> str:
    """Scale one of the agent's mutable hyperparameters; returns ``"name xfactor"``."""
    spec = agent.spec
    names = [n for n in agent.hp_names if n in spec.hpo_ranges]
    name = rng.choice(names)
    low, high, grow, shrink = spec.hpo_ranges[name]
    factor = grow if rng.random() < 0.5 else shrink
    current = getattr(spec, name)
    value = min(max(current * factor, low), high)
    if isinstance(current, int) and not isinstance(current, bool):
        value = round(value)
    agent.set_hyperparameters(**{name: value})
    return f"{name} x{factor}"


def evolve_population(population: list[Any], fitnesses: list[float], *, seed: int) -> list[dict]:
    """One generation in place: elitism, tournament copies, one mutation per copy.

    Args:
        population: Agents sharing one base model (any LoRA agents work).
        fitnesses: Latest fitness of each agent (higher is better).
        seed: Seed of this generation's draws (the loop passes seed + step,
            so a resumed run evolves identically).

    Returns:
        One lineage row per slot: parent, mutation and hyperparameters.
    """
    rng = random.Random(seed)
    n = len(population)
    elite = max(range(n), key=fitnesses.__getitem__)

    def winner() -> int:
        a, b = rng.randrange(n), rng.randrange(n)
        return a if fitnesses[a] >= fitnesses[b] else b

    parents = [elite] + [winner() for _ in range(n - 1)]
    # Deep copies: optimizer state tensors must not be shared between slots.
    states = [copy.deepcopy(population[p].checkpoint_state()) for p in parents]
    lineage = []
    for slot, (agent, parent, state) in enumerate(zip(population, parents, states, strict=True)):
        fitness = list(agent.fitness)
        agent.load_checkpoint_state(state, keep_index=True)
        agent.fitness = fitness
        agent.mut = None if slot == 0 else mutate(agent, rng)
        lineage.append(
            {
                "slot": slot,
                "parent": parent,
                "mutation": agent.mut,
                **{k: getattr(agent.spec, k) for k in agent.hp_names},
            }
        )
    return lineage
