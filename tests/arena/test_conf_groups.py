"""Every algorithm conf x every env conf composes; compatible pairs validate, others fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agilerl.arena.models import (
    ACTION_SPACE_KINDS,
    MANIFEST_REGISTRY,
    ConfigError,
    LLMAlgorithmSpec,
)
from agilerl.launch.compose import build_manifest

CONF = Path(__file__).resolve().parents[2] / "conf"
ALGORITHMS = sorted(p.stem for p in (CONF / "algorithm").glob("*.yaml"))
ENVS = sorted(p.stem for p in (CONF / "env").glob("*.yaml"))


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _compatible(algorithm: str, env: str) -> bool:
    spec_cls = MANIFEST_REGISTRY.get(_yaml(CONF / "algorithm" / f"{algorithm}.yaml")["name"])
    env_conf = _yaml(CONF / "env" / f"{env}.yaml")
    if env_conf["env_type"] != spec_cls.env_type:
        return False
    if spec_cls.objective and env_conf.get("objective") != spec_cls.objective:
        return False
    kind = ACTION_SPACE_KINDS.get(env_conf.get("name") or "CartPole-v1")  # custom: see below
    return kind is None or kind in spec_cls.action_space_kinds


def test_every_registered_spec_has_a_conf_file_and_back() -> None:
    conf_names = {_yaml(CONF / "algorithm" / f"{a}.yaml")["name"] for a in ALGORITHMS}
    for name in conf_names:
        assert name in MANIFEST_REGISTRY, f"conf/algorithm names unregistered {name}"
    covered = {MANIFEST_REGISTRY.get(n) for n in conf_names}
    for name, spec_cls in MANIFEST_REGISTRY.items():
        assert spec_cls in covered, f"no conf/algorithm file for {name}"


def test_conf_files_are_plain_data() -> None:
    for path in CONF.rglob("*.yaml"):
        text = path.read_text()
        # only Hydra's own plugin configs (launchers, sweepers) name classes
        assert "_target_" not in text or path.parent.parent.name == "hydra", path
        assert "!!python" not in text, path


def test_algorithm_conf_stems_match_spec_modules() -> None:
    modules = Path(__file__).resolve().parents[2] / "agilerl/arena/models/algorithms"
    for stem in ALGORITHMS:
        spec_cls = MANIFEST_REGISTRY.get(_yaml(CONF / "algorithm" / f"{stem}.yaml")["name"])
        module_stem = spec_cls.__module__.rsplit(".", 1)[-1]
        assert (modules / f"{module_stem}.py").exists()
        assert stem in (module_stem, "recurrent_ppo"), (stem, module_stem)


def _pairs() -> list:
    """Every algorithm x env pair; the default suite runs a cover of them (each algorithm
    with a compatible and an incompatible env, each env with a compatible algorithm and an
    incompatible one), the slow suite the rest (the product grows with every new group)."""
    cover: set[tuple[str, str]] = set()
    for algorithm in ALGORITHMS:
        for wanted in (True, False):
            env = next((e for e in ENVS if _compatible(algorithm, e) is wanted), None)
            if env is not None:
                cover.add((algorithm, env))
    for env in ENVS:
        for wanted in (True, False):
            algorithm = next((a for a in ALGORITHMS if _compatible(a, env) is wanted), None)
            if algorithm is not None:
                cover.add((algorithm, env))
    return [
        pytest.param(a, e, id=f"{a}-{e}", marks=() if (a, e) in cover else pytest.mark.slow)
        for e in ENVS
        for a in ALGORITHMS
    ]


@pytest.mark.parametrize(("algorithm", "env"), _pairs())
def test_pair_composes_and_validates(compose, algorithm: str, env: str) -> None:
    spec_cls = MANIFEST_REGISTRY.get(_yaml(CONF / "algorithm" / f"{algorithm}.yaml")["name"])
    network = "llm_lora" if issubclass(spec_cls, LLMAlgorithmSpec) else "mlp"
    if spec_cls.model_fields.get("recurrent") and spec_cls.model_fields["recurrent"].default:
        network = "lstm"  # a recurrent policy's encoder
    # env=custom is completed by the user's environment.name (here a gymnasium id)
    named = ("environment.name=CartPole-v1",) if _yaml(CONF / "env" / f"{env}.yaml").get(
        "name", "") is None else ()  # fmt: skip
    cfg = compose(f"algorithm={algorithm}", f"env={env}", f"network={network}", *named)
    if _compatible(algorithm, env):
        manifest, _ = build_manifest(cfg)
        assert manifest.algorithm.name == _yaml(CONF / "algorithm" / f"{algorithm}.yaml")["name"]
    else:
        with pytest.raises(ConfigError) as info:
            build_manifest(cfg)
        assert any(p.path.startswith("environment") for p in info.value.problems)


def test_env_field_override_spellings(compose) -> None:
    for spelling in ("environment.num_envs=3", "env.num_envs=3"):
        manifest, _ = build_manifest(compose("env=acrobot", spelling))
        assert manifest.environment.num_envs == 3 and manifest.algorithm.num_envs == 3


def test_tuned_file_is_picked_for_its_pair(compose) -> None:
    tuned, _ = build_manifest(compose("algorithm=ppo", "env=cartpole"))
    assert tuned.algorithm.update_epochs == 20 and tuned.training.target_score == 475
    plain, _ = build_manifest(compose("algorithm=ppo", "env=acrobot"))
    default = type(plain.algorithm).model_fields["update_epochs"].default
    assert plain.algorithm.update_epochs == default and plain.training.target_score is None


def test_presets_compose(compose) -> None:
    for experiment in sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")):
        manifest, _ = build_manifest(compose(f"experiment={experiment}"))
        assert manifest.algorithm.name
    for preset in ("standard", "per", "n_step", "per_n_step"):
        manifest, _ = build_manifest(
            compose("algorithm=rainbow_dqn", "env=cartpole", f"replay_buffer={preset}")
        )
        assert manifest.replay_buffer is not None
    manifest, _ = build_manifest(compose("hpo=evolutionary", "env=acrobot"))
    assert manifest.training.hpo and manifest.training.pop_size == 4 and manifest.mutation
    manifest, _ = build_manifest(compose("training=smoke", "network=cnn", "logger=wandb"))
    assert manifest.training.max_steps == 4096 and manifest.network.arch == "cnn"


def test_plus_override_of_unknown_field_is_caught_by_validation(compose) -> None:
    with pytest.raises(ConfigError) as info:
        build_manifest(compose("+algorithm.clip_cof=0.3"))
    assert str(info.value.problems[0]) == (
        "algorithm.clip_cof: unknown field (did you mean clip_coef?)"
    )


def test_unknown_group_option_lists_options(compose) -> None:
    with pytest.raises(ConfigError) as info:
        compose("algorithm=dqm")
    message = info.value.render()
    assert "did you mean dqn?" in message and "rainbow_dqn" in message
