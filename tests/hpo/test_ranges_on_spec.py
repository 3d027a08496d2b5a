"""Mutation ranges live on the spec fields, inside the fields' validation bounds.

One place per hyperparameter: its default, validation bounds, mutation range
and description are declared on the spec field (``mutable_field``); mutation,
initial populations and default search spaces read them from there.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pytest
import yaml
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticUndefined

from agilerl.arena.models.hpo import MutationSpec
from agilerl.arena.models.mutable import is_integer_field
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.hpo.ranges import mutated_value, resolve_field_name

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted({cls for _, cls in MANIFEST_REGISTRY.items()}, key=lambda c: c.__name__)


def _valid(spec_cls: type, name: str, value: Any) -> bool:
    """Whether ``value`` passes the field's own validation (type and bounds)."""
    info = spec_cls.model_fields[name]
    annotation = (
        Annotated.__class_getitem__((info.annotation, *info.metadata))
        if info.metadata
        else info.annotation
    )
    adapter = TypeAdapter(annotation)
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("spec_cls", SPECS, ids=lambda c: c.__name__)
def test_mutation_ranges_lie_inside_the_validation_bounds(spec_cls: type) -> None:
    ranges = spec_cls.mutation_ranges()
    assert ranges, f"{spec_cls.__name__} declares nothing evolutionary HPO can tune"
    for name, span in ranges.items():
        integer = is_integer_field(spec_cls.model_fields[name])
        for end in (span.low, span.high):
            value = int(end) if integer else end
            assert not integer or value == end, f"{name}: integer field with a fractional end"
            assert _valid(spec_cls, name, value), f"{spec_cls.__name__}.{name}: {end} is invalid"
        assert span.grow >= 1.0 >= span.shrink > 0.0


@pytest.mark.parametrize("spec_cls", SPECS, ids=lambda c: c.__name__)
def test_every_default_lies_inside_the_validation_bounds(spec_cls: type) -> None:
    for name, info in spec_cls.model_fields.items():
        if info.default is PydanticUndefined or info.default_factory is not None:
            continue
        assert _valid(spec_cls, name, info.default), f"{spec_cls.__name__}.{name} default"


def _algorithm_spec_of(conf_stem: str) -> type:
    names = {
        path.stem: yaml.safe_load(path.read_text())["name"]
        for path in (REPO / "conf" / "algorithm").glob("*.yaml")
    }
    stem = max((s for s in names if conf_stem.startswith(f"{s}_")), key=len)
    return MANIFEST_REGISTRY.get(names[stem])


TUNED = sorted((REPO / "conf" / "tuned").glob("*.yaml"))


@pytest.mark.parametrize("path", TUNED, ids=lambda p: p.stem)
def test_every_tuned_value_lies_inside_the_validation_bounds(path: Path) -> None:
    spec_cls = _algorithm_spec_of(path.stem)
    preset = yaml.safe_load(path.read_text())
    section = preset.get("algorithm") or {}
    assert section or preset.get("training"), f"{path.name} tunes neither algorithm nor budget"
    for key, value in section.items():
        name = resolve_field_name(spec_cls, key)
        assert name is not None, f"{path.name}: {key} is not a {spec_cls.__name__} field"
        assert _valid(spec_cls, name, value), f"{path.name}: {key}={value!r} is invalid"


def test_a_tuned_value_outside_the_range_moves_from_where_it_is() -> None:
    """DQN CartPole's tuned tau (0.05) is not snapped to the range: a generation of
    rl_hp mutations keeps it within a factor 2 (the old table clipped it to 0.01)."""
    from agilerl.arena.models.algorithms import DQNSpec

    tuned = yaml.safe_load((REPO / "conf" / "tuned" / "dqn_cartpole.yaml").read_text())
    tau = tuned["algorithm"]["tau"]
    span = DQNSpec.mutation_ranges()["tau"].as_tuple()
    for grow in (True, False):
        new = mutated_value(tau, span, grow=grow, integer=False)
        assert tau / 2 <= new <= tau * 2 and new != tau
    outside = (span[0], tau / 2, span[2], span[3])  # a range the tuned value lies above
    assert mutated_value(tau, outside, grow=True, integer=False) == pytest.approx(tau * span[3])
    assert mutated_value(tau, outside, grow=False, integer=False) == pytest.approx(tau * span[3])


def test_dqn_cartpole_tau_stays_within_a_factor_two_after_a_generation(compose) -> None:
    """Through the whole path: conf groups -> manifest -> agents -> the trainer's Mutations."""
    import gymnasium as gym

    from agilerl.arena.models.manifest import TrainingManifest
    from agilerl.builders import select_builder
    from agilerl.builders.runtime import AlgorithmBuildRuntime
    from agilerl.hpo import Mutations
    from agilerl.launch.compose import split_config

    manifest = TrainingManifest.from_dict(split_config(compose("algorithm=dqn", "env=cartpole"))[0])
    spec = manifest.algorithm_with_network()
    assert spec.tau == 0.05
    env = gym.make("CartPole-v1")
    builder = select_builder(spec)
    population = [
        builder.build(
            spec, env.observation_space, env.action_space, runtime=AlgorithmBuildRuntime(i, "cpu")
        )
        for i in range(12)
    ]
    mutation = MutationSpec(probabilities={"no_mut": 0.0, "arch_mut": 0.0, "params_mut": 0.0})
    operator = Mutations.from_spec(mutation, spec, rng_seed=0)
    operator.mutation(population, pre_training=True)
    taus = [a.spec.tau for a in population]
    assert any(t != 0.05 for t in taus)  # some members mutated tau (seeded)
    assert all(0.025 <= t <= 0.1 for t in taus)


@pytest.mark.parametrize(
    ("old", "grow", "expected"),
    [(1, True, 2), (2, False, 1), (1, False, 2), (10, True, 8), (4, True, 6)],
)
def test_integer_mutations_always_move(old: int, grow: bool, expected: int) -> None:
    """An integer moves by at least one; at an edge it turns back (never a silent no-op)."""
    assert mutated_value(old, (1, 10, 1.5, 0.75), grow=grow, integer=True) == expected


def test_values_inside_the_range_stay_inside_it() -> None:
    rng = np.random.default_rng(0)
    span = (1e-4, 1e-2, 1.2, 0.8)
    value = 1e-3
    for _ in range(500):
        value = mutated_value(value, span, grow=bool(rng.random() < 0.5), integer=False)
        assert span[0] <= value <= span[1] and math.isfinite(value)
