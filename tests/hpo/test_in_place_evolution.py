"""One evolution for every paradigm: in place (shared base model) it equals the clone path."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from agilerl.arena.models.algorithms import DQNSpec
from agilerl.arena.models.hpo import MutationSpec
from agilerl.hpo import Mutations, TournamentSelection
from agilerl.hpo.evolution import Evolution


class Member:
    """The part of an agent evolution touches: weights (a number), spec, counters."""

    def __init__(self, index: int, weight: float, fitness: float) -> None:
        self.index, self.weight, self.fitness = index, weight, [fitness]
        self.spec, self.mut = DQNSpec(), None

    def clone(self, index: int | None = None) -> Member:
        other = copy.deepcopy(self)
        other.index = self.index if index is None else index
        return other

    def checkpoint_state(self) -> dict[str, Any]:
        return {"weight": self.weight, "spec": self.spec}

    def load_checkpoint_state(self, state: dict[str, Any], *, keep_index: bool = False) -> None:
        self.weight, self.spec = state["weight"], state["spec"]


def _evolution(keep_incumbents: bool, seed: int) -> Evolution:
    never = MutationSpec(
        probabilities={"no_mut": 1.0, "arch_mut": 0.0, "params_mut": 0.0, "rl_hp_mut": 0.0}
    )
    return Evolution(
        TournamentSelection(
            2, True, 4, rng=np.random.default_rng(seed), keep_incumbents=keep_incumbents
        ),
        Mutations.from_spec(never, DQNSpec(), rng_seed=seed),
    )


@pytest.mark.parametrize("keep_incumbents", [True, False])
@pytest.mark.parametrize("fitness", [[1, 1, 5, 1], [5, 1, 2, 1], [1, 2, 3, 9], [4, 4, 4, 4]])
def test_in_place_evolution_keeps_every_member_where_the_clone_path_puts_its_weights(
    keep_incumbents: bool, fitness: list[float]
) -> None:
    for seed in range(5):
        population = [Member(i, float(10 * i), f) for i, f in enumerate(fitness)]
        cloned, rows = _evolution(keep_incumbents, seed).evolve(
            [m.clone() for m in population], generation=1, step=0
        )
        in_place = [m.clone() for m in population]
        _, slot_rows = _evolution(keep_incumbents, seed).evolve_in_place(
            in_place, generation=1, step=0
        )
        best = int(np.argmax(fitness))
        # the elite stays in its slot, unchanged
        assert slot_rows[best]["elite"] and in_place[best].weight == 10 * best
        assert slot_rows[best]["detail"] == "elite kept"
        # the same parents' weights survive, as many times each
        assert sorted(m.weight for m in in_place) == sorted(m.weight for m in cloned)
        assert sorted(r["parent"] for r in slot_rows) == sorted(r["parent"] for r in rows)
        for slot, (member, row) in enumerate(zip(in_place, slot_rows, strict=True)):
            assert member.index == slot and member.weight == 10 * row["parent"]
            if keep_incumbents and row["parent"] == slot and not row["elite"]:
                assert row["detail"] == "kept place"  # an incumbent that kept its own slot
