"""Evolution operators as the trainer builds them from a manifest, for loop-level tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from agilerl.arena.models.hpo import MutationSpec
from agilerl.hpo import Mutations, TournamentSelection
from agilerl.hpo.evolution import Evolution

NO_MUTATION = {"no_mut": 0.0, "arch_mut": 0.0, "params_mut": 0.0, "act_mut": 0.0, "rl_hp_mut": 0.0}


def make_evolution(
    spec: Any,
    size: int,
    seed: int = 0,
    *,
    mutate_elite: bool = False,
    selection: dict[str, Any] | None = None,
    **probabilities: float,
) -> Evolution:
    """Plain tournaments with elitism and mutations of the given weights (others 0).

    ``selection`` is ``mutation.rl_hp_selection`` (default: the spec's ranges).
    """
    weights = {**NO_MUTATION, **probabilities}
    if not any(weights[k] for k in NO_MUTATION):
        weights["no_mut"] = 1.0
    mutation = MutationSpec(
        probabilities=weights, mutate_elite=mutate_elite, rl_hp_selection=selection or {}
    )
    return Evolution(
        TournamentSelection(2, True, size, rng=np.random.default_rng(seed)),
        Mutations.from_spec(mutation, spec, rng_seed=seed + 1),
    )
