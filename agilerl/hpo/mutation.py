"""Mutations of evolutionary HPO: RL hyperparameters, architecture, weights, activation.

Each agent of a population independently gets exactly one mutation, drawn
with the normalised weights of ``no_mut``, ``arch_mut``, ``params_mut``,
``act_mut`` and ``rl_hp_mut`` (zero weights are never drawn):

* ``None``: nothing changes.
* ``rl_hp``: one hyperparameter of ``rl_hp_ranges`` that the agent's spec has
  (with a finite, non-zero current value) is multiplied by the grow or the
  shrink factor (probability 1/2 each) from where it is, by the one rule of
  :func:`agilerl.hpo.ranges.mutated_value` (integers rounded, moving at least
  one). It is set through the agent's spec (a new validated spec); learning
  rates also reach the optimizers.
* ``arch``: an edit of the encoder or head MLP in a copy of ``net_config``
  (see :func:`agilerl.hpo.architecture.edit_mlp`): with probability
  ``new_layer`` a layer is added or removed, otherwise nodes are added to or
  removed from one layer; an impossible edit falls back to the other kinds
  and the other section, and to ``None`` when no edit is legal. The agent is
  rebuilt (:func:`agilerl.hpo.architecture.rebuild_agent`) with its weights
  transferred.
* ``param``: Gaussian noise ``N(0, (mutation_sd * |w|)^2)`` is added in place to
  about 10% of the entries of a random non-empty subset of the 2-D weight
  matrices of the policy network(s) (``actor``; not targets, norms or noise
  scales).
* ``act``: the hidden activation of the MLP sections becomes another entry of
  ``activation_selection``; the agent is rebuilt and all weights transfer
  exactly.

Every random choice, including the initialisation of new layers, comes from
the generator given to :class:`Mutations`, so the same seed gives the same
mutations.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agilerl.algorithms.core.rng import generator_from_state, generator_state
from agilerl.hpo.architecture import edit_mlp, editable_sections, rebuild_agent, set_activation
from agilerl.hpo.group_architecture import mutate_group_architecture
from agilerl.hpo.ranges import (
    HpRange,
    check_ranges,
    integer_field,
    movable,
    mutated_value,
    ranges_from_selection,
    ranges_from_spec,
    resolve_field_name,
)
from agilerl.networks.activations import check_activation

__all__ = ["MUTATION_KINDS", "Mutations", "generator_from_state", "generator_state"]

MUTATION_KINDS: dict[str, str] = {
    "no_mut": "None",
    "arch_mut": "arch",
    "params_mut": "param",
    "act_mut": "act",
    "rl_hp_mut": "rl_hp",
}
"""Probability key -> the ``mutation`` kind written to :attr:`Mutations.last_records`."""

PARAM_FRACTION = 0.1
"""Share of a perturbed matrix's entries that parameter noise changes."""

_ARCH_FAILURES = (ValueError, NotImplementedError, RuntimeError, TypeError)


def _torch_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**31 - 1))


class Mutations:
    """Mutation operator of evolutionary HPO (see the module docstring).

    Args:
        probabilities: Weights of ``no_mut``, ``arch_mut``, ``params_mut``,
            ``act_mut`` and ``rl_hp_mut`` (normalised; missing ones count as 0),
            plus ``new_layer``: the probability that an architecture mutation
            changes depth rather than width.
        rl_hp_ranges: ``{name: (min, max, grow_factor, shrink_factor)}``.
        mutation_sd: Relative std of parameter noise.
        activation_selection: Activations an activation mutation picks from.
        mutate_elite: Mutate ``population[0]`` (the elite) too.
        rng: Random generator (a fresh unseeded one when ``None``).

    Attributes:
        last_records: After :meth:`mutation`, one dict per agent:
            ``{"index", "mutation", "detail"}`` with ``mutation`` one of
            ``"None" | "arch" | "param" | "act" | "rl_hp"``.

    Raises:
        ValueError: For negative or unknown probabilities, bad ranges, an
            unknown activation or a negative ``mutation_sd``.
    """

    def __init__(
        self,
        probabilities: Mapping[str, float],
        rl_hp_ranges: Mapping[str, Sequence[float]],
        mutation_sd: float = 0.1,
        activation_selection: Sequence[str] = ("ReLU", "ELU", "GELU"),
        mutate_elite: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        probabilities = dict(probabilities)
        unknown = set(probabilities) - set(MUTATION_KINDS) - {"new_layer"}
        if unknown:
            raise ValueError(f"Unknown mutation probabilities: {sorted(unknown)}")
        weights = {k: float(probabilities.get(k, 0.0) or 0.0) for k in MUTATION_KINDS}
        if any(not math.isfinite(w) or w < 0 for w in weights.values()):
            raise ValueError(f"Mutation probabilities must be finite and >= 0, got {weights}")
        total = sum(weights.values())
        if total <= 0:
            weights, total = {"no_mut": 1.0}, 1.0
        self.kinds = [MUTATION_KINDS[k] for k, w in weights.items() if w > 0]
        self.weights = np.array([w / total for w in weights.values() if w > 0])
        self.new_layer = float(probabilities.get("new_layer", 0.2) or 0.0)
        if not 0.0 <= self.new_layer <= 1.0:
            raise ValueError(f"new_layer must be in [0, 1], got {self.new_layer}")
        self.rl_hp_ranges: dict[str, HpRange] = check_ranges(rl_hp_ranges)
        if float(mutation_sd) < 0:
            raise ValueError(f"mutation_sd must be >= 0, got {mutation_sd}")
        self.mutation_sd = float(mutation_sd)
        self.activation_selection = tuple(str(a) for a in activation_selection)
        for name in self.activation_selection:
            check_activation(name)
        self.mutate_elite = bool(mutate_elite)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.last_records: list[dict[str, Any]] = []

    # --- construction from the manifest ---------------------------------------------
    @classmethod
    def from_spec(
        cls, mutation_spec: Any, algo_spec_cls_or_instance: Any, rng_seed: int | None = None
    ) -> Mutations:
        """Build from a ``MutationSpec`` and the algorithm's spec (class or instance).

        Kinds the algorithm's paradigm cannot apply (``mutation_kinds`` of its
        spec) get weight 0: validation refuses a manifest that asks for them, so
        only the defaults of a manifest without a ``mutation`` section are dropped.

        Args:
            mutation_spec: The manifest's ``mutation`` section.
            algo_spec_cls_or_instance: The algorithm spec; the ranges declared on
                its fields are used when ``rl_hp_selection`` is empty.
            rng_seed: Seed of the generator (``mutation_spec.rand_seed`` when ``None``).
        """
        probs = mutation_spec.probabilities
        probabilities = probs.model_dump() if hasattr(probs, "model_dump") else dict(probs)
        kinds = getattr(algo_spec_cls_or_instance, "mutation_kinds", None)
        if kinds is not None:
            probabilities = {
                k: (v if k not in MUTATION_KINDS or k in kinds else 0.0)
                for k, v in probabilities.items()
            }
        if mutation_spec.rl_hp_selection:
            selected = ranges_from_selection(mutation_spec.rl_hp_selection)
            ranges = {
                resolve_field_name(algo_spec_cls_or_instance, k) or k: v
                for k, v in selected.items()
            }
        else:
            ranges = ranges_from_spec(algo_spec_cls_or_instance)
        seed = mutation_spec.rand_seed if rng_seed is None else rng_seed
        return cls(
            probabilities,
            ranges,
            mutation_sd=mutation_spec.mutation_sd,
            activation_selection=tuple(mutation_spec.activation_selection),
            mutate_elite=mutation_spec.mutate_elite,
            rng=np.random.default_rng(seed),
        )

    # --- state -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The generator state as plain data."""
        return {"rng": generator_state(self.rng)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.rng = generator_from_state(state["rng"])

    # --- the operator ------------------------------------------------------------------
    def mutation(
        self,
        population: list[Any],
        pre_training: bool = False,
        keep: Collection[int] = (),
        elite: Collection[int] | None = None,
    ) -> list[Any]:
        """Mutate every agent once (see the module docstring).

        Args:
            population: The agents; ``population[0]`` is the elite.
            pre_training: Mutating before any training (there is no elite yet),
                so ``population[0]`` is mutated even when ``mutate_elite`` is off.
            keep: Indices of agents left unchanged: members that kept their
                place in selection (``TournamentSelection(keep_incumbents=True)``)
                go on training as they were; only the clones that replaced
                others explore.
            elite: Indices of the elite (kept unless ``mutate_elite``);
                ``None``: ``population[0]`` is the elite.

        Returns:
            The agents in order; architecture and activation mutations return
            new agent objects, the others mutate in place.
        """
        out: list[Any] = []
        records: list[dict[str, Any]] = []
        for i, agent in enumerate(population):
            is_elite = i == 0 if elite is None else agent.index in elite
            if is_elite and not self.mutate_elite and not pre_training:
                agent.mut = "None"
                out.append(agent)
                records.append({"index": agent.index, "mutation": "None", "detail": "elite kept"})
                continue
            if agent.index in keep:
                agent.mut = "None"
                out.append(agent)
                records.append({"index": agent.index, "mutation": "None", "detail": "kept place"})
                continue
            kind = str(self.rng.choice(self.kinds, p=self.weights))
            agent, kind, label, detail = self._apply(agent, kind)
            agent.mut = label
            out.append(agent)
            records.append({"index": agent.index, "mutation": kind, "detail": detail})
        self.last_records = records
        return out

    def _apply(self, agent: Any, kind: str) -> tuple[Any, str, str, str]:
        """``(agent, kind, label, detail)`` after one mutation of ``kind``."""
        if kind == "rl_hp":
            result = self.rl_hyperparam_mutation(agent)
            if result is not None:
                return agent, kind, result[0], result[1]
        elif kind == "param":
            detail = self.parameter_mutation(agent)
            if detail:
                return agent, kind, "param", detail
        elif kind == "arch":
            new, detail = self.architecture_mutation(agent)
            if detail:
                return new, kind, "arch", detail
        elif kind == "act":
            new, detail = self.activation_mutation(agent)
            if detail:
                return new, kind, "act", detail
        return agent, "None", "None", ""

    # --- rl hyperparameters ------------------------------------------------------------
    def rl_hyperparam_mutation(self, agent: Any) -> tuple[str, str] | None:
        """Grow or shrink one hyperparameter in place.

        Returns:
            ``(name, "name old->new")``, or ``None`` when the agent's spec has
            none of the hyperparameters in ``rl_hp_ranges`` with a value a
            factor can move.
        """
        spec = getattr(agent, "spec", None)
        fields = type(spec).model_fields if spec is not None else {}
        names = [
            name
            for name in self.rl_hp_ranges
            if name in fields and movable(getattr(spec, name, None))
        ]
        if not names:
            return None
        name = names[int(self.rng.integers(len(names)))]
        span = self.rl_hp_ranges[name]
        old = getattr(spec, name)
        grow = bool(self.rng.random() < 0.5)
        integer = integer_field(spec, name) or isinstance(old, int)
        new = mutated_value(old, span, grow=grow, integer=integer)
        set_hyperparameter(agent, name, new)
        return name, f"{name} {old:.6g}->{new:.6g}"

    # --- parameter noise ---------------------------------------------------------------
    @torch.no_grad()
    def parameter_mutation(self, agent: Any) -> str:
        """Add relative Gaussian noise in place to some weights of the policy network(s).

        Returns:
            A detail like ``"actor: 2/3 matrices, 130 entries"`` ("" when the
            agent has no perturbable weights).
        """
        matrices = policy_weight_matrices(agent)
        if not matrices:
            return ""
        chosen = self.rng.random(len(matrices)) < 0.5
        if not chosen.any():
            chosen[int(self.rng.integers(len(matrices)))] = True
        changed = 0
        for (_, weight), pick in zip(matrices, chosen, strict=True):
            if not pick:
                continue
            shape = tuple(weight.shape)
            mask = self.rng.random(shape) < PARAM_FRACTION
            if not mask.any():
                mask.flat[int(self.rng.integers(mask.size))] = True
            noise = self.rng.standard_normal(shape) * self.mutation_sd * mask
            delta = torch.as_tensor(noise, dtype=weight.dtype, device=weight.device)
            weight.add_(delta * weight.abs())
            changed += int(mask.sum())
        _refresh_caches(agent)
        nets = sorted({name.split(".", 1)[0] for name, _ in matrices})
        return f"{'+'.join(nets)}: {int(chosen.sum())}/{len(matrices)} matrices, {changed} entries"

    # --- architecture ------------------------------------------------------------------
    def architecture_mutation(self, agent: Any) -> tuple[Any, str]:
        """Add/remove a layer or nodes of the encoder or head MLP, rebuilding the agent.

        Returns:
            ``(agent, detail)``: a new agent and e.g. ``"head add_layer [64]->[64, 64]"``,
            or the unchanged agent and ``""`` when no legal edit exists.
        """
        if hasattr(agent, "policies"):  # multi-agent: one network section per agent group
            return mutate_group_architecture(agent, self.rng, self.new_layer)
        net_config = getattr(agent, "net_config", None)
        if not isinstance(net_config, Mapping):
            return agent, ""
        sections = editable_sections(net_config)
        order = [sections[int(i)] for i in self.rng.permutation(len(sections))]
        layer_ops = ["add_layer", "remove_layer"]
        node_ops = ["add_nodes", "remove_nodes"]
        if self.rng.random() < 0.5:
            layer_ops.reverse()
        if self.rng.random() < 0.5:
            node_ops.reverse()
        ops = layer_ops + node_ops if self.rng.random() < self.new_layer else node_ops + layer_ops
        for section in order:
            for op in ops:
                edited = edit_mlp(net_config, section, op, self.rng)
                if edited is not None:
                    new = self._rebuild(agent, edited[0])
                    return (new, edited[1]) if new is not None else (agent, "")
        return agent, ""

    # --- activation --------------------------------------------------------------------
    def activation_mutation(self, agent: Any) -> tuple[Any, str]:
        """Switch the hidden activation to another of ``activation_selection``.

        Returns:
            ``(agent, detail)``: a new agent (weights transferred exactly) and
            e.g. ``"activation ReLU->GELU"``, or the unchanged agent and ``""``.
        """
        net_config = getattr(agent, "net_config", None)
        if not isinstance(net_config, Mapping):
            return agent, ""
        current = (net_config.get("head_config") or {}).get("activation")
        options = [a for a in self.activation_selection if a != current]
        if not options:
            return agent, ""
        choice = options[int(self.rng.integers(len(options)))]
        edited = set_activation(net_config, choice)
        if edited is None:
            return agent, ""
        new = self._rebuild(agent, edited[0])
        return (new, edited[1]) if new is not None else (agent, "")

    def _rebuild(self, agent: Any, net_config: dict[str, Any]) -> Any | None:
        seed = _torch_seed(self.rng)
        try:
            return rebuild_agent(agent, net_config, seed=seed)
        except _ARCH_FAILURES as exc:
            warnings.warn(
                f"Could not rebuild agent {getattr(agent, 'index', '?')} with the mutated "
                f"network ({type(exc).__name__}: {exc}); it is left unchanged",
                stacklevel=3,
            )
            return None


# --- helpers -----------------------------------------------------------------------
def set_hyperparameter(agent: Any, name: str, value: float) -> None:
    """Set a hyperparameter through the agent's spec (learning rates reach the optimizers)."""
    if hasattr(agent, "set_hp"):
        agent.set_hp(**{name: value})
    elif hasattr(agent, "set_hyperparameters"):
        agent.set_hyperparameters(**{name: value})
    else:
        setattr(agent, name, value)


def policy_network_names(agent: Any) -> list[str]:
    """Networks parameter noise perturbs: online actor networks (the first network otherwise).

    Names come from ``network_names``, or from ``_networks()`` for agents that keep
    their networks in a mapping (multi-agent: ``actors``, one module per policy).
    """
    names = list(getattr(agent, "network_names", ()))
    if not names and hasattr(agent, "_networks"):
        names = list(agent._networks())
    chosen = [n for n in names if "actor" in n and "target" not in n]
    return chosen or names[:1]


def policy_weight_matrices(agent: Any) -> list[tuple[str, torch.Tensor]]:
    """``(qualified name, parameter)`` of the trainable 2-D weights of the policy network(s).

    Norm parameters (1-D), biases, frozen parameters, noise scales (``*sigma*``)
    and recurrent (LSTM) weights are excluded; shared parameters appear once. An
    agent that names its own (``policy_weights()``: an LLM agent's LoRA adapter on
    a shared base model) is taken at its word.
    """
    if hasattr(agent, "policy_weights"):
        return [(f"adapter.{name}", param) for name, param in agent.policy_weights()]
    seen: set[int] = set()
    out: list[tuple[str, torch.Tensor]] = []
    networks = agent._networks() if hasattr(agent, "_networks") else {}
    for net_name in policy_network_names(agent):
        network = networks[net_name] if net_name in networks else getattr(agent, net_name)
        for name, param in network.named_parameters():
            if (
                param.dim() != 2
                or not param.requires_grad
                or not param.is_floating_point()
                or "sigma" in name
                or ".lstm." in f".{name}"
                or id(param) in seen
            ):
                continue
            seen.add(id(param))
            out.append((f"{net_name}.{name}", param))
    return out


def _refresh_caches(agent: Any) -> None:
    """Drop cached copies of the weights (PPO's fused actor-critic snapshot)."""
    if hasattr(agent, "_fused_key"):
        agent._fused_key = None
        agent._fused = None
