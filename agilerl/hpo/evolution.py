"""One evolution step for every paradigm: tournament selection, mutation, lineage.

Every population loop (single-agent, multi-agent, offline, bandit, LLM)
evolves through :class:`Evolution`, built from the manifest's
``tournament_selection`` and ``mutation`` sections, so the same settings mean
the same thing everywhere and ``hpo.csv`` has the same columns for every run:

``generation, step, index, parent, elite, parent_fitness, mutation, detail, hp_<name>...``

Two ways to form the next generation, chosen by the paradigm:

* :meth:`Evolution.evolve` clones the parents (RL agents: each member owns its
  networks).
* :meth:`Evolution.evolve_in_place` copies each parent's state into the slots
  of the existing agents (LLM agents: the members are adapters on one shared
  base model, so a slot is never duplicated). A slot keeps its index.

The elite and incumbents that kept their place are never mutated (unless
``mutation.mutate_elite``), as in every loop before.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from agilerl.hpo.mutation import Mutations
from agilerl.hpo.tournament import TournamentSelection

__all__ = ["Evolution", "live_hyperparameters"]


def live_hyperparameters(agent: Any) -> dict[str, Any]:
    """The agent's mutable hyperparameters (its spec's mutable fields) as ``hp_<name>`` columns."""
    spec = getattr(agent, "spec", None)
    if spec is None:
        return {}
    values = {}
    for name in type(spec).mutation_ranges():
        value = getattr(spec, name, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            values[f"hp_{name}"] = value
    return values


class Evolution:
    """Tournament selection then mutation, with one lineage row per new member.

    Args:
        tournament: The selection operator.
        mutation: The mutation operator.
    """

    def __init__(self, tournament: TournamentSelection, mutation: Mutations) -> None:
        self.tournament = tournament
        self.mutation = mutation

    def evolve(
        self, population: Sequence[Any], *, generation: int, step: int
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """The next generation (clones of the parents, mutated) and its lineage rows."""
        links = self.tournament.plan(population)
        new = [population[ln["source"]].clone(index=ln["index"]) for ln in links]
        return self._mutate(population, new, links, generation, step)

    def evolve_in_place(
        self, population: Sequence[Any], *, generation: int, step: int
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        """Like :meth:`evolve`, copying parents' states into the existing agents' slots.

        The agents need ``checkpoint_state()`` and
        ``load_checkpoint_state(state, keep_index=True)``; every agent keeps
        its index (its slot), and the lineage names slots.
        """
        planned = self.tournament.plan(population)
        links = _slots(planned, len(population))
        # Snapshot first: a slot may be overwritten before another copies it.
        sources = {ln["source"] for slot, ln in enumerate(links) if ln["source"] != slot}
        states = {s: copy.deepcopy(population[s].checkpoint_state()) for s in sources}
        parents = [int(population[ln["source"]].index) for ln in links]
        slot_links = []
        for slot, (agent, ln) in enumerate(zip(population, links, strict=True)):
            source = ln["source"]
            if source != slot:
                fitness = list(agent.fitness)
                agent.load_checkpoint_state(states[source], keep_index=True)
                agent.fitness = fitness
            slot_links.append(
                {**ln, "index": int(agent.index), "parent": parents[slot],
                 "kept": ln["kept"] and source == slot}
            )  # fmt: skip
        return self._mutate(population, list(population), slot_links, generation, step)

    def _mutate(
        self,
        old: Sequence[Any],
        new: list[Any],
        links: list[dict[str, Any]],
        generation: int,
        step: int,
    ) -> tuple[list[Any], list[dict[str, Any]]]:
        fitness_of = {
            int(agent.index): (agent.fitness[-1] if agent.fitness else None) for agent in old
        }
        kept = {ln["index"] for ln in links if ln["kept"] and not ln["elite"]}
        elite = {ln["index"] for ln in links if ln["elite"]}
        mutated = self.mutation.mutation(new, keep=kept, elite=elite)
        records = {r["index"]: r for r in self.mutation.last_records}
        rows = []
        for agent, ln in zip(mutated, links, strict=True):
            record = records.get(agent.index, {})
            rows.append(
                {
                    "generation": generation,
                    "step": step,
                    "index": int(agent.index),
                    "parent": ln["parent"],
                    "elite": bool(ln["elite"]),
                    "parent_fitness": fitness_of.get(ln["parent"]),
                    "mutation": record.get("mutation", "None"),
                    "detail": record.get("detail", ""),
                    **live_hyperparameters(agent),
                }
            )
        return mutated, rows


def _slots(links: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """The planned links ordered by the slot each takes: its ``place`` where it has one
    (the elite stays where it is, an incumbent in the slot it defended), the rest in
    the free slots in order."""
    placed: list[dict[str, Any] | None] = [None] * size
    rest = []
    for ln in links:
        if ln.get("place") is not None and placed[ln["place"]] is None:
            placed[ln["place"]] = ln
        else:
            rest.append(ln)
    free = iter(rest)
    return [ln if ln is not None else next(free) for ln in placed]
