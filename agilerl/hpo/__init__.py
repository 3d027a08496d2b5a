"""Evolutionary hyperparameter optimisation: tournament selection, mutations, one evolution."""

from __future__ import annotations

from agilerl.hpo.architecture import edit_mlp, rebuild_agent, set_activation, transfer_weights
from agilerl.hpo.evolution import Evolution
from agilerl.hpo.initial import sample_starts, start_population
from agilerl.hpo.mutation import MUTATION_KINDS, Mutations
from agilerl.hpo.ranges import mutated_value, ranges_from_spec
from agilerl.hpo.tournament import TournamentSelection, windowed_fitness

__all__ = [
    "MUTATION_KINDS",
    "Evolution",
    "Mutations",
    "TournamentSelection",
    "edit_mlp",
    "mutated_value",
    "ranges_from_spec",
    "rebuild_agent",
    "sample_starts",
    "set_activation",
    "start_population",
    "transfer_weights",
    "windowed_fitness",
]
