"""Tournament selection between generations of evolutionary HPO."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agilerl.algorithms.core.rng import generator_from_state, generator_state

__all__ = ["TournamentSelection", "windowed_fitness"]


def windowed_fitness(agent: Any, window: int = 1) -> float:
    """Mean of the agent's last ``window`` fitness values (``-inf`` if none or not finite)."""
    values = [float(f) for f in list(getattr(agent, "fitness", []))[-max(1, int(window)) :]]
    if not values:
        return -math.inf
    mean = float(np.mean(values))
    return mean if math.isfinite(mean) else (math.inf if mean == math.inf else -math.inf)


class TournamentSelection:
    """Select the next generation by elitism plus tournaments.

    Fitness is the mean of each agent's last ``fitness_window`` values; agents
    without fitness (or with NaN fitness) rank last. Ties go to the agent
    earlier in the population (for the elite) or drawn earlier (tournaments).

    With ``keep_incumbents`` (and a population of ``population_size``) every
    member other than the elite defends its place in its own tournament
    against ``tournament_size - 1`` rivals drawn (uniformly, with replacement)
    from the other members: it stays (same index, same weights) unless the
    fittest rival is strictly fitter, in which case a clone of that rival
    takes the place (PBT's exploit by binary tournament). Members that
    evaluate alike (early in training, when every member still scores the
    same) therefore all keep training instead of being replaced by random
    picks, so a promising start is not lost to a draw before it shows.
    Without it every place goes to the winner of a tournament of
    ``tournament_size`` uniform draws.

    Args:
        tournament_size: Agents drawn (uniformly, with replacement) per tournament.
        elitism: Keep a clone of the best agent, with its index, as the first member.
        population_size: Size of the new population.
        fitness_window: Number of most recent fitness values averaged.
        rng: Random generator (a fresh unseeded one when ``None``).
        keep_incumbents: Members keep their place unless a rival is strictly fitter.

    Raises:
        ValueError: If a size or the window is below 1.
    """

    def __init__(
        self,
        tournament_size: int,
        elitism: bool,
        population_size: int,
        fitness_window: int = 1,
        rng: np.random.Generator | None = None,
        keep_incumbents: bool = False,
    ) -> None:
        for name, value in (
            ("tournament_size", tournament_size),
            ("population_size", population_size),
            ("fitness_window", fitness_window),
        ):
            if int(value) < 1:
                raise ValueError(f"TournamentSelection {name} must be >= 1, got {value}")
        self.tournament_size = int(tournament_size)
        self.elitism = bool(elitism)
        self.population_size = int(population_size)
        self.fitness_window = int(fitness_window)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.keep_incumbents = bool(keep_incumbents)
        self.next_index = 0

    def fitness(self, agent: Any) -> float:
        """The fitness selection ranks ``agent`` by (see :func:`windowed_fitness`)."""
        return windowed_fitness(agent, self.fitness_window)

    def _tournament(self, scores: np.ndarray) -> int:
        drawn = self.rng.integers(0, len(scores), size=self.tournament_size)
        return int(drawn[int(np.argmax(scores[drawn]))])

    def _defend(self, scores: np.ndarray, incumbent: int) -> int:
        """The incumbent, unless the fittest of ``tournament_size - 1`` drawn rivals is fitter."""
        if self.tournament_size < 2 or len(scores) < 2:
            return incumbent
        drawn = self.rng.integers(0, len(scores) - 1, size=self.tournament_size - 1)
        rivals = drawn + (drawn >= incumbent)  # the other members, uniformly
        best = int(rivals[int(np.argmax(scores[rivals]))])
        return best if scores[best] > scores[incumbent] else incumbent

    def plan(self, population: Sequence[Any]) -> list[dict[str, Any]]:
        """Choose the next generation's parents without building it.

        Args:
            population: The evaluated agents.

        Returns:
            One ``{"source", "index", "parent", "elite", "kept", "place"}`` dict
            per new member, in order: ``source`` is the position in
            ``population`` of the member it copies, ``index`` its identity (the
            parent's for the elite and kept incumbents, a fresh one otherwise),
            ``parent`` the parent's index, ``kept`` whether an incumbent kept
            its place, ``place`` the position it takes over when the members
            stay in their slots (the elite's own; with ``keep_incumbents`` the
            incumbent's it defended; ``None``: any free one). See :meth:`select`
            for the order.

        Raises:
            ValueError: For an empty population.
        """
        if not population:
            raise ValueError("TournamentSelection.select needs a non-empty population")
        scores = np.array([self.fitness(agent) for agent in population], dtype=np.float64)
        best_slot = int(np.argmax(scores))
        self.next_index = max(self.next_index, max(int(a.index) for a in population) + 1)
        links: list[dict[str, Any]] = []

        def link(source: int, keep: bool, place: int | None, elite: bool = False) -> None:
            parent = int(population[source].index)
            if keep or elite:
                index = parent
            else:
                index = self.next_index
                self.next_index += 1
            links.append(
                {"source": source, "index": index, "parent": parent, "elite": elite,
                 "kept": keep, "place": place}
            )  # fmt: skip

        if self.elitism:
            link(best_slot, keep=False, place=best_slot, elite=True)
        if self.keep_incumbents and len(population) == self.population_size:
            for slot in range(len(population)):
                if self.elitism and slot == best_slot:
                    continue
                winner = self._defend(scores, slot)
                link(winner, keep=winner == slot, place=slot)
            return links
        while len(links) < self.population_size:
            link(self._tournament(scores), keep=False, place=None)
        return links

    def select(self, population: Sequence[Any]) -> tuple[Any, list[Any], list[dict[str, Any]]]:
        """Build the next generation by cloning the parents :meth:`plan` chose.

        Args:
            population: The evaluated agents.

        Returns:
            ``(elite, new_population, lineage)``: ``elite`` is a clone of the
            best agent (same index), separate from the population; with
            elitism ``new_population[0]`` is another clone of it (same index)
            followed by ``population_size - 1`` tournament winners, otherwise
            ``population_size`` winners. Winners are clones with fresh indices
            (one above the highest index seen so far, increasing). ``lineage``
            has one ``{"index", "parent", "elite"}`` dict per new member, in order.
            With ``keep_incumbents`` the members after the elite are the old
            members other than the best, in order, each either kept (a clone
            with its own index; ``parent == index``) or replaced by a winner.

        Raises:
            ValueError: For an empty population.
        """
        links = self.plan(population)
        scores = [self.fitness(agent) for agent in population]
        elite = population[int(np.argmax(scores))].clone()
        new_population = [population[ln["source"]].clone(index=ln["index"]) for ln in links]
        lineage = [
            {"index": ln["index"], "parent": ln["parent"], "elite": ln["elite"]} for ln in links
        ]
        return elite, new_population, lineage

    def state_dict(self) -> dict[str, Any]:
        """Generator state and the next fresh index, as plain data."""
        return {"rng": generator_state(self.rng), "next_index": int(self.next_index)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.rng = generator_from_state(state["rng"])
        self.next_index = int(state.get("next_index", 0))
