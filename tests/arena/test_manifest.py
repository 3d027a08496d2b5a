"""TrainingManifest: section dispatch, inference, cross-section rules, error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from agilerl.arena.models import (
    ConfigError,
    DQNSpec,
    GymEnvSpec,
    LLMEnvSpec,
    NetworkSpec,
    TrainingManifest,
)

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def errors_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        TrainingManifest.from_dict(data)
    return [str(p) for p in info.value.problems]


def test_minimal_manifest_fills_defaults() -> None:
    manifest = TrainingManifest.from_dict(
        {"algorithm": {"name": "DQN"}, "environment": {"name": "CartPole-v1"}}
    )
    assert isinstance(manifest.algorithm, DQNSpec)
    assert isinstance(manifest.environment, GymEnvSpec)
    assert manifest.environment.env_type == "gym"
    assert manifest.training.evo_steps == 10_000
    assert manifest.api_version == "agilerl.com/v1"


def test_evo_steps_default_is_capped_by_max_steps() -> None:
    manifest = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "PPO"},
            "environment": {"name": "CartPole-v1"},
            "training": {"max_steps": 300},
        }
    )
    assert manifest.training.evo_steps == 300


@pytest.mark.parametrize(
    ("algorithm", "environment", "env_type", "objective"),
    [
        ({"name": "CQN"}, {"name": "CartPole-v1", "dataset_path": "d.npz"}, "offline", None),
        ({"name": "NeuralUCB"}, {"dataset": "iris"}, "bandit", None),
        ({"name": "DPO"}, {"dataset": "p.jsonl"}, "dataset", "preference"),
        ({"name": "SFT"}, {"dataset": "s.jsonl"}, "dataset", "sft"),
        ({"name": "IPPO"}, {"name": "mpe2.simple_spread_v3"}, "pettingzoo", None),
    ],
)
def test_env_type_and_objective_are_inferred(algorithm, environment, env_type, objective) -> None:
    data = {"algorithm": algorithm, "environment": environment}
    if algorithm["name"] in ("DPO", "SFT"):
        data["network"] = {"pretrained_model_name_or_path": "m", "max_context_length": 64}
    manifest = TrainingManifest.from_dict(data)
    assert str(manifest.environment.env_type) == env_type
    assert getattr(manifest.environment, "objective", None) == objective


def test_num_envs_is_copied_and_conflicts_are_reported() -> None:
    manifest = TrainingManifest.from_dict(
        {"algorithm": {"name": "PPO"}, "environment": {"name": "CartPole-v1", "num_envs": 8}}
    )
    assert manifest.algorithm.num_envs == 8
    ddpg = TrainingManifest.from_dict(
        {"algorithm": {"name": "TD3"}, "environment": {"name": "Pendulum-v1", "num_envs": 3}}
    )
    assert ddpg.algorithm.vect_noise_dim == 3
    errors = errors_of(
        {
            "algorithm": {"name": "PPO", "num_envs": 2},
            "environment": {"name": "CartPole-v1", "num_envs": 8},
        }
    )
    assert errors == [
        "algorithm.num_envs: 2 disagrees with 8 set by another section; set it in one place only"
    ]


def test_llm_network_is_lifted_onto_the_algorithm() -> None:
    manifest = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "GRPO", "group_size": 4},
            "environment": {
                "dataset": "c.jsonl",
                "rubric_file_path": "r.py",
                "prompt_template": {"user_0": "{q}"},
            },
            "network": {
                "pretrained_model_name_or_path": "tiny",
                "max_context_length": 256,
                "lora_config": {"lora_r": 8},
            },
        }
    )
    spec = manifest.algorithm
    assert spec.pretrained_model_name_or_path == "tiny"
    assert spec.max_model_len == 256 and spec.lora_config.lora_r == 8
    assert isinstance(manifest.environment, LLMEnvSpec)
    assert str(manifest.environment.env_type) == "rollout"


def test_rainbow_n_step_follows_the_buffer() -> None:
    manifest = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "RainbowDQN"},
            "environment": {"name": "CartPole-v1"},
            "replay_buffer": {
                "n_step_buffer": True,
                "n_step_buffer_args": {"n_step": 5},
                "per_buffer": True,
            },
        }
    )
    assert manifest.algorithm.n_step == 5


def test_all_problems_are_listed_at_once_with_paths() -> None:
    errors = errors_of(
        {
            "algorithm": {"name": "PPO", "clip_cof": 0.3, "gamma": 2},
            "environment": {"name": "CartPole-v1", "num_env": 3},
            "training": {"max_step": 10, "pop_size": 0},
            "trainig": {},
        }
    )
    assert "algorithm.clip_cof: unknown field (did you mean clip_coef?)" in errors
    assert "environment.num_env: unknown field (did you mean num_envs?)" in errors
    assert "training.max_step: unknown field (did you mean max_steps?)" in errors
    assert "trainig: unknown section (did you mean training?)" in errors
    assert any(e.startswith("algorithm.gamma: ") and "less than or equal to 1" in e for e in errors)
    assert any(e.startswith("training.pop_size: ") for e in errors)
    assert len(errors) == 6


def test_wrong_type_names_the_value() -> None:
    (error,) = errors_of(
        {"algorithm": {"name": "DQN", "batch_size": "big"}, "environment": {"name": "CartPole-v1"}}
    )
    assert error.startswith("algorithm.batch_size: ") and "'big'" in error


@pytest.mark.parametrize(
    ("data", "path", "words"),
    [
        (
            {"algorithm": {"name": "PPPO"}, "environment": {"name": "CartPole-v1"}},
            "algorithm.name",
            ["did you mean PPO?", "DQN", "GRPO"],
        ),
        ({"environment": {"name": "CartPole-v1"}}, "algorithm", ["missing"]),
        (
            {"algorithm": {"lr": 1}, "environment": {"name": "CartPole-v1"}},
            "algorithm.name",
            ["missing"],
        ),
        ({"algorithm": "PPO", "environment": {"name": "CartPole-v1"}}, "algorithm", ["mapping"]),
        (
            {"algorithm": {"name": "DQN"}, "environment": {"name": "Pendulum-v1"}},
            "environment.name",
            ["DQN", "discrete", "Pendulum-v1", "continuous"],
        ),
        (
            {"algorithm": {"name": "TD3"}, "environment": {"name": "CartPole-v1"}},
            "environment.name",
            ["TD3", "continuous", "CartPole-v1"],
        ),
        (
            {
                "algorithm": {"name": "MADDPG"},
                "environment": {"env_type": "gym", "name": "CartPole-v1"},
            },
            "environment.env_type",
            ["MADDPG", "PettingZoo"],
        ),
        (
            {
                "algorithm": {"name": "PPO"},
                "environment": {"env_type": "pettingzoo", "name": "mpe2.simple_spread_v3"},
            },
            "environment.env_type",
            ["PPO", "gymnasium"],
        ),
        (
            {
                "algorithm": {"name": "GRPO", "group_size": 2},
                "environment": {
                    "dataset": "d.jsonl",
                    "rubric_file_path": "r.py",
                    "prompt_template": {"user_0": "x"},
                },
            },
            "network.pretrained_model_name_or_path",
            ["GRPO", "network=llm_lora"],
        ),
        (
            {
                "algorithm": {"name": "GRPO"},
                "environment": {
                    "dataset": "d.jsonl",
                    "rubric_file_path": "r.py",
                    "prompt_template": {"user_0": "x"},
                },
                "network": {"pretrained_model_name_or_path": "m"},
            },
            "algorithm.group_size",
            ["required"],
        ),
        (
            {
                "algorithm": {"name": "PPO"},
                "environment": {"name": "CartPole-v1"},
                "network": {"pretrained_model_name_or_path": "m"},
            },
            "network",
            ["RL network"],
        ),
        (
            {
                "algorithm": {"name": "DQN"},
                "environment": {"name": "CartPole-v1"},
                "replay_buffer": {"per_buffer": True},
            },
            "replay_buffer.per_buffer",
            ["RainbowDQN"],
        ),
        (
            {
                "algorithm": {"name": "DQN"},
                "environment": {"name": "CartPole-v1"},
                "mutation": {"rl_hp_selection": {"lrr": {"min": 0.1, "max": 1}}},
            },
            "mutation.rl_hp_selection.lrr",
            ["did you mean lr?", "batch_size"],
        ),
        (
            {
                "algorithm": {"name": "DQN"},
                "environment": {"name": "CartPole-v1"},
                "mutation": {"rl_hp_selection": {"double": {"min": 0, "max": 1}}},
            },
            "mutation.rl_hp_selection.double",
            ["no numeric"],
        ),
        (
            {
                "algorithm": {"name": "DQN"},
                "environment": {"name": "CartPole-v1"},
                "training": {"hpo": True, "pop_size": 2},
                "mutation": {
                    "probabilities": {"no_mut": 0, "arch_mut": 0, "params_mut": 0, "rl_hp_mut": 0}
                },
            },
            "mutation.probabilities",
            ["zero"],
        ),
        (
            {
                "algorithm": {"name": "DQN"},
                "environment": {"name": "CartPole-v1"},
                "training": {"hpo": True, "pop_size": 2},
                "tournament_selection": {"tournament_size": 3},
            },
            "tournament_selection.tournament_size",
            ["pop_size"],
        ),
        (
            {
                "algorithm": {"name": "RecurrentPPO", "recurrent": False},
                "environment": {"name": "CartPole-v1"},
            },
            "algorithm.name",
            ["implies recurrent=True"],
        ),
        (
            {
                "algorithm": {"name": "PPO", "recurrent": True},
                "environment": {"name": "CartPole-v1"},
                "network": {"arch": "simba"},
            },
            "network.simba",
            ["recurrent"],
        ),
        (
            {
                "apiVersion": "v2",
                "algorithm": {"name": "PPO"},
                "environment": {"name": "CartPole-v1"},
            },
            "apiVersion",
            ["agilerl.com/v1"],
        ),
        (
            {
                "algorithm": {"name": "PPO"},
                "environment": {"name": "mpe2.simple_spread_v3", "env_type": "gym"},
            },
            "environment",
            ["env_type: pettingzoo"],
        ),
    ],
)
def test_bad_manifests_name_the_path_and_the_fix(data: dict, path: str, words: list[str]) -> None:
    errors = errors_of(data)
    matching = [e for e in errors if e.startswith(f"{path}: ")]
    assert matching, errors
    for word in words:
        assert word in matching[0], matching[0]


def test_selection_strategy_alias_and_empty_mutation() -> None:
    manifest = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "DQN"},
            "environment": {"name": "CartPole-v1"},
            "selection_strategy": {"tournament_size": 3},
            "mutation": {},
        }
    )
    assert manifest.tournament_selection.tournament_size == 3
    assert manifest.mutation is None


def test_round_trip_through_to_dict() -> None:
    original = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "Recurrent PPO", "lr": 0.01},
            "environment": {"name": "CartPole-v1", "num_envs": 4},
            "network": {"arch": "lstm", "latent_dim": 16},
            "training": {"max_steps": 1000},
        }
    )
    data = original.to_dict()
    assert data["algorithm"]["name"] == "Recurrent PPO"
    again = TrainingManifest.from_dict(data)
    assert again.to_dict() == data
    assert again.algorithm.recurrent


def test_algorithm_with_network_uses_the_concrete_network_class() -> None:
    manifest = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "DQN"},
            "environment": {"name": "CartPole-v1"},
            "network": {"latent_dim": 16, "encoder_config": {"hidden_size": [32]}},
        }
    )
    spec = manifest.algorithm_with_network()
    assert type(spec.net_config).__name__ == "QNetworkSpec"
    assert isinstance(spec.net_config, NetworkSpec) and spec.net_config.latent_dim == 16
    assert spec.name == "DQN"


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.*")), ids=lambda p: p.name)
def test_reference_layout_manifests_validate(path: Path) -> None:
    manifest = TrainingManifest.from_file(path)
    assert manifest.algorithm.name


def test_manifest_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        TrainingManifest.from_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        TrainingManifest.from_file(bad)
    listy = tmp_path / "list.json"
    listy.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="mapping"):
        TrainingManifest.from_file(listy)
    code = tmp_path / "code.yaml"
    code.write_text("algorithm: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        TrainingManifest.from_file(code)
    typo = tmp_path / "typo.yaml"
    typo.write_text("algorithm: {name: PPO, clip_cof: 1}\nenvironment: {name: CartPole-v1}\n")
    with pytest.raises(ConfigError) as info:
        TrainingManifest.from_file(typo)
    assert str(typo) in info.value.render() and "clip_coef" in info.value.render()


def _public(name: str) -> dict:
    import yaml

    return yaml.safe_load((Path(__file__).parents[1] / "manifests" / name).read_text())


@pytest.mark.parametrize(
    ("manifest", "kind"),
    [("grpo_countdown.yaml", "arch_mut"), ("grpo_countdown.yaml", "act_mut")],
)
def test_a_mutation_kind_the_paradigm_cannot_apply_is_refused(manifest: str, kind: str) -> None:
    data = _public(manifest)
    data["training"]["hpo"] = True
    data["mutation"]["probabilities"][kind] = 0.3
    with pytest.raises(ConfigError, match=rf"mutation\.probabilities\.{kind}.*cannot apply"):
        TrainingManifest.from_dict(data)
    data["mutation"]["probabilities"][kind] = 0.0
    assert TrainingManifest.from_dict(data).mutation.probabilities.rl_hp_mut == 0.6


def test_multi_agent_activation_mutation_is_refused() -> None:
    data = {
        "algorithm": {"name": "MATD3"},
        "environment": {"name": "mpe2.simple_speaker_listener_v4", "env_type": "pettingzoo"},
        "training": {"hpo": True, "pop_size": 2},
        "mutation": {"probabilities": {"act_mut": 0.2}},
    }
    with pytest.raises(ConfigError, match=r"mutation\.probabilities\.act_mut"):
        TrainingManifest.from_dict(data)
    data["mutation"]["probabilities"] = {"arch_mut": 0.3, "params_mut": 0.2}
    TrainingManifest.from_dict(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Make {target:>99999999}", r"pads or rounds to more than 200 characters"),
        ("Make {0}", r"\{0\} is not a column name"),
        ("Make {row.__class__}", r"\{row.__class__\} is not a column name"),
        ("Make {target[0]}", r"is not a column name"),
        ("Make {target", r"expected '\}' before end of string"),
    ],
)
def test_a_prompt_template_only_places_column_values(text: str, message: str) -> None:
    """A template is data: it may not expand to gigabytes or reach into objects."""

    def manifest(template: str) -> dict:
        env = {
            "env_type": "rollout",
            "dataset": "data/countdown.jsonl",
            "reward": "countdown",
            "prompt_template": {"user_0": template},
        }
        return {
            "algorithm": {"name": "GRPO", "group_size": 2},
            "environment": env,
            "network": {"pretrained_model_name_or_path": "tiny"},
        }

    with pytest.raises(ConfigError, match=message) as error:
        TrainingManifest.from_dict(manifest(text))
    assert "environment.prompt_template" in str(error.value)
    TrainingManifest.from_dict(manifest("Using {nums}, make {target:>4}; {{literal}}"))
