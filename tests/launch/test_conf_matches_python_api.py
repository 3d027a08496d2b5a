"""train.py and the Python API train the same agent.

For every registered algorithm conf x every env conf it can train on, tuned pairs
included, the manifest Hydra composes for ``algorithm=<a> env=<e>`` equals the one
``LocalTrainer(<registry name>, <env id>)`` validates: the trainer finds the env group
and the pair's ``conf/tuned/`` preset by the env's id (``agilerl.launch.presets``).
Algorithm and network confs restate no spec default.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agilerl.arena.models.algorithms import LLMAlgorithmSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.launch.compose import build_manifest
from agilerl.trainer import LocalTrainer

CONF = Path(__file__).resolve().parents[2] / "conf"


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _pairs() -> list[tuple[str, str]]:
    pairs = []
    for algorithm in sorted(CONF.glob("algorithm/*.yaml")):
        spec_cls = MANIFEST_REGISTRY.get(_yaml(algorithm)["name"])
        for env in sorted(CONF.glob("env/*.yaml")):
            env_section = _yaml(env)
            if "name" in env_section and env_section["name"] is None:
                continue  # env=custom: the user names the env on the command line
            kind_fits = env_section.get("env_type", "gym") == spec_cls.env_type
            objective = env_section.get("objective", spec_cls.objective)
            kind_fits = kind_fits and (spec_cls.objective in (None, objective))
            if kind_fits:
                pairs.append((algorithm.stem, env.stem))
    return pairs


PAIRS = _pairs()


def _env_as_a_user_names_it(stem: str) -> str | dict:
    """A gym or PettingZoo env by its bare id; other kinds by the fields that name them
    (and a variant by the setting that makes it one)."""
    group = _yaml(CONF / "env" / f"{stem}.yaml")
    kind = group.get("env_type", "gym")
    if kind == "pettingzoo" and stem.endswith("_continuous"):
        return {"name": group["name"], "env_config": {"continuous_actions": True}}
    if kind in ("gym", "pettingzoo"):
        return group["name"]
    key = "name" if "name" in group else "dataset"
    return {"env_type": kind, key: group[key]}


def test_every_algorithm_conf_holds_only_its_name_and_required_fields() -> None:
    for path in sorted(CONF.glob("algorithm/*.yaml")):
        section = _yaml(path)
        spec_cls = MANIFEST_REGISTRY.get(section["name"])
        extra = {k for k in section if k != "name" and not spec_cls.model_fields[k].is_required()}
        assert not extra, f"{path.name} restates {sorted(extra)}: move them to conf/tuned/"


@pytest.mark.parametrize(("algorithm", "env"), PAIRS, ids=[f"{a}-{e}" for a, e in PAIRS])
def test_composed_manifest_equals_the_python_api_manifest(
    compose, algorithm: str, env: str, tmp_path: Path
) -> None:
    section = _yaml(CONF / "algorithm" / f"{algorithm}.yaml")
    spec_cls = MANIFEST_REGISTRY.get(section["name"])
    llm = issubclass(spec_cls, LLMAlgorithmSpec)
    overrides = [f"algorithm={algorithm}", f"env={env}"] + (["network=llm_lora"] if llm else [])
    try:
        composed, _ = build_manifest(compose(*overrides))
    except ConfigError as exc:
        if "action space" in str(exc):
            pytest.skip(f"{algorithm} cannot act in {env}")
        raise
    trainer = LocalTrainer(
        section["name"],
        _env_as_a_user_names_it(env),
        network=_yaml(CONF / "network" / "llm_lora.yaml") if llm else None,
        run_dir=tmp_path,
        verbose=False,
        trust_code=True,  # the shipped env confs' code (a reward file) is the repository's own
    )
    assert composed.to_dict() == trainer.manifest.to_dict()
    assert (
        composed.algorithm_with_network().model_dump()
        == trainer.manifest.algorithm_with_network().model_dump()
    )


@pytest.mark.parametrize("name", ["auto", "mlp"])
def test_default_network_confs_restate_no_spec_default(name: str) -> None:
    from agilerl.arena.models.networks import NetworkSpec

    section = _yaml(CONF / "network" / f"{name}.yaml")
    arch = (section.get("encoder_config") or {}).get("arch")
    bare = NetworkSpec.model_validate({"encoder_config": {"arch": arch}} if arch else {})
    assert NetworkSpec.model_validate(section).model_dump() == bare.model_dump()


def test_your_fields_win_over_the_preset_and_presets_false_starts_from_the_specs(
    tmp_path: Path,
) -> None:
    tuned = _yaml(CONF / "tuned" / "dqn_cartpole.yaml")
    trainer = LocalTrainer(
        {"name": "DQN", "lr": 0.01},
        {"name": "CartPole-v1", "num_envs": 2},
        {"max_steps": 50_000},
        run_dir=tmp_path / "a",
        verbose=False,
    )
    algorithm, training = trainer.manifest.algorithm, trainer.manifest.training
    assert algorithm.lr == 0.01 and algorithm.batch_size == tuned["algorithm"]["batch_size"]
    assert trainer.manifest.environment.num_envs == 2
    assert training.max_steps == 50_000
    assert training.target_score == tuned["training"]["target_score"]
    bare = LocalTrainer("DQN", "CartPole-v1", presets=False, run_dir=tmp_path / "b", verbose=False)
    spec_defaults = type(bare.manifest.algorithm)()
    assert bare.manifest.algorithm.lr == spec_defaults.lr != tuned["algorithm"]["lr"]
    assert bare.manifest.training.target_score is None
