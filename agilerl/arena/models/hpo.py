"""Evolutionary HPO specs: the manifest's ``mutation`` and ``tournament_selection``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from agilerl.arena.models.base import StrictModel


class RLHyperparameter(StrictModel):
    """The range a mutable hyperparameter may move in."""

    min: float = Field(..., description="Lowest value.")
    max: float = Field(..., description="Highest value.")
    grow_factor: float = Field(1.2, ge=1.0, description="Multiplier when growing.")
    shrink_factor: float = Field(0.8, ge=0.0, le=1.0, description="Multiplier when shrinking.")

    @model_validator(mode="after")
    def _ordered(self) -> RLHyperparameter:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class MutationProbabilities(StrictModel):
    """Relative weights of each mutation kind (normalised; need not sum to 1)."""

    no_mut: float = Field(0.4, ge=0.0, le=1.0, description="Leave the agent unchanged.")
    arch_mut: float = Field(0.2, ge=0.0, le=1.0, description="Add/remove layers or nodes.")
    new_layer: float = Field(
        0.2, ge=0.0, le=1.0, description="Share of architecture mutations that change depth."
    )
    params_mut: float = Field(0.2, ge=0.0, le=1.0, description="Gaussian noise on weights.")
    act_mut: float = Field(0.0, ge=0.0, le=1.0, description="Swap the activation function.")
    rl_hp_mut: float = Field(0.2, ge=0.0, le=1.0, description="Change an RL hyperparameter.")

    def total(self) -> float:
        """Sum of the weights that pick a mutation kind (``new_layer`` is a sub-choice)."""
        return self.no_mut + self.arch_mut + self.params_mut + self.act_mut + self.rl_hp_mut


def no_op_mutation_probabilities() -> MutationProbabilities:
    """Probabilities that never mutate."""
    return MutationProbabilities(
        no_mut=1.0, arch_mut=0.0, new_layer=0.0, params_mut=0.0, act_mut=0.0, rl_hp_mut=0.0
    )


class NetworkMutationRanges(StrictModel):
    """Network bounds written under ``mutation.network``; folded into ``network``."""

    min_latent_dim: int | None = Field(None, gt=0, description="Smallest latent width.")
    max_latent_dim: int | None = Field(None, gt=1, description="Largest latent width.")
    encoder: dict[str, Any] = Field(default_factory=dict, description="Encoder bounds.")
    head_net: dict[str, Any] = Field(default_factory=dict, description="Head bounds.")


class MutationSpec(StrictModel):
    """How agents mutate between generations."""

    name: str | None = Field(None, description="Label.")
    probabilities: MutationProbabilities = Field(
        default_factory=MutationProbabilities, description="Weights of each mutation kind."
    )
    rl_hp_selection: dict[str, RLHyperparameter] = Field(
        default_factory=dict,
        description="Hyperparameters to mutate and their ranges; empty uses the algorithm's.",
    )
    mutation_sd: float = Field(0.1, ge=0.0, description="Std of parameter noise.")
    rand_seed: int = Field(42, ge=0, description="Seed of the mutation RNG.")
    activation_selection: list[str] = Field(
        default_factory=lambda: ["ReLU", "ELU", "GELU"],
        description="Activations an activation mutation picks from.",
    )
    mutate_elite: bool = Field(
        False, description="Mutate the elite too (by default it is kept unchanged)."
    )
    network: NetworkMutationRanges | None = Field(None, description="Network bounds.")
    dormant_threshold: float = Field(0.01, ge=0.0, description="Dormant-neuron threshold.")


class TournamentSelectionSpec(StrictModel):
    """Tournament selection between generations."""

    strategy: Literal["tournament"] = Field("tournament", description="Selection strategy.")
    name: str | None = Field(None, description="Label.")
    tournament_size: int = Field(2, ge=1, description="Agents drawn per tournament.")
    elitism: bool = Field(True, description="Keep the best agent unchanged.")
    keep_incumbents: bool = Field(
        True,
        description="Each member keeps its place (and trains on, unmutated) unless a rival "
        "drawn for its tournament is strictly fitter; false fills every place with the "
        "winner of a tournament of random draws.",
    )
