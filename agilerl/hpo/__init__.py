"""Evolutionary hyperparameter optimisation: tournament selection and mutations."""

from __future__ import annotations

from agilerl.hpo.architecture import edit_mlp, rebuild_agent, set_activation, transfer_weights
from agilerl.hpo.initial import sample_starts, start_population
from agilerl.hpo.mutation import MUTATION_KINDS, Mutations
from agilerl.hpo.ranges import INT_HYPERPARAMETERS, ranges_from_spec
from agilerl.hpo.tournament import TournamentSelection, windowed_fitness

__all__ = [
    "INT_HYPERPARAMETERS",
    "MUTATION_KINDS",
    "Mutations",
    "TournamentSelection",
    "edit_mlp",
    "ranges_from_spec",
    "rebuild_agent",
    "sample_starts",
    "set_activation",
    "start_population",
    "transfer_weights",
    "windowed_fitness",
]
