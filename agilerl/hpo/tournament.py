"""Tournament selection between generations of evolutionary HPO."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agilerl.hpo.mutation import generator_from_state, generator_state

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

    Args:
        tournament_size: Agents drawn (uniformly, with replacement) per tournament.
        elitism: Keep a clone of the best agent, with its index, as the first member.
        population_size: Size of the new population.
        fitness_window: Number of most recent fitness values averaged.
        rng: Random generator (a fresh unseeded one when ``None``).

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
        self.next_index = 0

    def fitness(self, agent: Any) -> float:
        """The fitness selection ranks ``agent`` by (see :func:`windowed_fitness`)."""
        return windowed_fitness(agent, self.fitness_window)

    def _tournament(self, scores: np.ndarray) -> int:
        drawn = self.rng.integers(0, len(scores), size=self.tournament_size)
        return int(drawn[int(np.argmax(scores[drawn]))])

    def select(self, population: Sequence[Any]) -> tuple[Any, list[Any], list[dict[str, Any]]]:
        """Build the next generation.

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

        Raises:
            ValueError: For an empty population.
        """
        if not population:
            raise ValueError("TournamentSelection.select needs a non-empty population")
        scores = np.array([self.fitness(agent) for agent in population], dtype=np.float64)
        best = population[int(np.argmax(scores))]
        self.next_index = max(self.next_index, max(int(a.index) for a in population) + 1)
        elite = best.clone()
        new_population: list[Any] = []
        lineage: list[dict[str, Any]] = []
        if self.elitism:
            new_population.append(best.clone(index=best.index))
            lineage.append({"index": int(best.index), "parent": int(best.index), "elite": True})
        while len(new_population) < self.population_size:
            parent = population[self._tournament(scores)]
            index = self.next_index
            self.next_index += 1
            new_population.append(parent.clone(index=index))
            lineage.append({"index": index, "parent": int(parent.index), "elite": False})
        return elite, new_population, lineage

    def state_dict(self) -> dict[str, Any]:
        """Generator state and the next fresh index, as plain data."""
        return {"rng": generator_state(self.rng), "next_index": int(self.next_index)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.rng = generator_from_state(state["rng"])
        self.next_index = int(state.get("next_index", 0))
