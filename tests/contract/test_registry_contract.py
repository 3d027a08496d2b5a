"""The contract every registered algorithm keeps, one parametrized file instead of a copy each.

Specs (every registered name): the name is the registry key, dumps round-trip,
every numeric hyperparameter has a range. Algorithms whose paradigm trains in
this version (read from the strategy, so the list grows by itself), built
through their builder as the trainer builds them: a wrong action space is
refused, clones are independent, checkpoints round-trip, evaluation in the
paradigm's env records fitness, spec values reach the agent, and a NaN loss
stops training with a clear error.

Each paradigm is checked in its own env: gym vector envs for on-/off-policy,
the same for offline RL (its evaluation env) with a dataset recorded by this
file, and a :class:`~agilerl.envs.bandits.BanditEnv` (Iris) for the bandits.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import annotated_types as at
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from agilerl.arena.models.algorithms import LLMAlgorithmSpec, MultiAgentAlgorithmSpec
from agilerl.arena.models.env import BanditEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.builders import AlgorithmBuildRuntime, select_builder
from agilerl.envs.bandits import BanditEnv, make_bandit_env
from agilerl.envs.offline import Episode, write_mdp_file
from agilerl.evaluate import greedy_action
from agilerl.strategies import PopulationRuntime, strategy_for
from agilerl.strategies.bandit import BanditStrategy
from agilerl.strategies.offline import OfflineStrategy
from agilerl.trainer import LocalTrainer

HERE = Path(__file__).parent
TINY_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}
TINY_LSTM = {
    "latent_dim": 16,
    "encoder_config": {"arch": "lstm", "hidden_state_size": 16},
    "head_config": {"hidden_size": [16]},
}
ENV_BY_KIND = {"discrete": "CartPole-v1", "continuous": "Pendulum-v1"}
NAMES = MANIFEST_REGISTRY.names()
# one name per spec class: aliases ("RainbowDQN" beside "Rainbow DQN") build the same agent
CLASSES = {cls: name for name, cls in reversed(MANIFEST_REGISTRY.items())}
# LLM algorithms fine-tune a language model on text, not an agent in an env: tests/llm checks
# them; multi-agent algorithms act on per-agent dicts in PettingZoo envs: tests/algorithms_ma
# checks their clones, checkpoints (weights_only), spec values and evaluation
TRAINABLE = sorted(
    name
    for cls, name in CLASSES.items()
    if strategy_for(cls).trainable
    and not issubclass(cls, LLMAlgorithmSpec | MultiAgentAlgorithmSpec)
)


def _is(name: str, strategy: type) -> bool:
    return isinstance(strategy_for(MANIFEST_REGISTRY.get(name)), strategy)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)


def _create(name: str, **fields: Any) -> Any:
    spec_cls = MANIFEST_REGISTRY.get(name)
    required = {k: 2 for k, f in spec_cls.model_fields.items() if f.is_required()}
    return MANIFEST_REGISTRY.create(name, **{**required, **fields})


# --- specs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_name_is_the_registry_key_and_dumps_round_trip(name: str) -> None:
    spec = _create(name)
    assert spec.name == name
    dumped = spec.model_dump()
    assert type(spec).model_validate(dumped).model_dump() == dumped
    assert type(spec).model_validate_json(spec.model_dump_json()).model_dump() == dumped


def _numeric(annotation: Any) -> bool:
    text = str(annotation)
    return ("int" in text or "float" in text) and "tuple" not in text and "dict" not in text


@pytest.mark.parametrize("name", NAMES)
def test_every_numeric_hyperparameter_has_a_range(name: str) -> None:
    spec_cls = MANIFEST_REGISTRY.get(name)
    unbounded = []
    for field, info in spec_cls.model_fields.items():
        if not _numeric(info.annotation):
            continue
        if not any(isinstance(m, at.Ge | at.Gt) for m in info.metadata):
            unbounded.append(field)
        rate = field.startswith("lr") or field in ("tau", "gamma", "gae_lambda", "clip_coef")
        if rate and not any(isinstance(m, at.Le | at.Lt) for m in info.metadata):
            unbounded.append(f"{field} (no upper bound)")
    assert not unbounded, f"{name}: {unbounded}"


# --- agents of the paradigms that train -----------------------------------------------------
def _spec(name: str, **fields: Any) -> Any:
    spec = _create(name, **fields)
    recurrent = getattr(spec, "recurrent", False)  # a recurrent policy's encoder is an LSTM
    return _create(name, net_config=TINY_LSTM if recurrent else TINY_NET, **fields)


def _kind(spec: Any) -> str:
    return "discrete" if "discrete" in spec.action_space_kinds else "continuous"


def _env(spec: Any, num_envs: int = 2) -> gym.vector.VectorEnv | BanditEnv:
    """The env the paradigm acts in: a bandit over Iris, else a gym vector env."""
    if _is(spec.name, BanditStrategy):
        return make_bandit_env(BanditEnvSpec(name="IRIS", dataset="iris"), seed=0)
    return gym.make_vec(
        ENV_BY_KIND[_kind(spec)],
        num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def _build(spec: Any, env: Any, index: int = 0) -> Any:
    return select_builder(spec).build(
        spec,
        env.single_observation_space,
        env.single_action_space,
        runtime=AlgorithmBuildRuntime(index=index, total_steps=10_000),
    )


def _params(agent: Any) -> list[torch.Tensor]:
    return [
        p.detach().clone()
        for name in agent.network_names
        for p in getattr(agent, name).parameters()
    ]


def _hp(agent: Any, field: str) -> Any:
    spec = getattr(agent, "spec", None)
    return getattr(spec, field) if spec is not None else getattr(agent, field)


def _obs(env: Any, n: int = 8) -> list[Any]:
    """``n`` single observations (for a bandit: the arm contexts of ``n`` steps)."""
    if isinstance(env, BanditEnv):
        contexts = [env.reset(seed=3)]
        while len(contexts) < n:
            contexts.append(env.step(0)[0])
        return contexts
    space = env.single_observation_space
    space.seed(3)
    return [space.sample() for _ in range(n)]


def _nan_env_section(
    name: str, kind: str, tmp_path: Path, huge: bool = False, **extra: Any
) -> dict[str, Any]:
    """The ``nan_envs`` env; for offline RL with a dataset recorded in it (bad rewards too)."""
    entry = f"nan_envs:huge_{kind}" if huge else f"nan_envs:{kind}"
    section = {"name": "Nan-v0", "entrypoint": entry, "path": str(HERE), **extra}
    if _is(name, OfflineStrategy):
        data = _nan_dataset(tmp_path, huge)
        section |= {"env_type": "offline", "dataset_path": str(data)}
    return section


def _nan_dataset(tmp_path: Path, huge: bool = False) -> Path:
    """200 random-action steps of ``nan_envs.discrete`` (bad rewards from step 41 on)."""
    import nan_envs

    env = nan_envs.huge_discrete() if huge else nan_envs.discrete()
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    observations, actions, rewards = [obs], [], []
    for _ in range(200):
        action = env.action_space.sample()
        obs, reward, _, _, _ = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
    episode = Episode(np.stack(observations), np.array(actions), np.array(rewards), False)
    return write_mdp_file(tmp_path / "nan.npz", [episode], env_id="Nan-v0")


@pytest.mark.parametrize("name", TRAINABLE)
def test_an_action_space_it_cannot_act_in_is_refused(name: str, tmp_path: Path) -> None:
    if _is(name, BanditStrategy):
        pytest.skip(
            "a bandit's action space is Discrete(arms) of its table; no bandit env has another"
        )
    spec = _spec(name)
    wrong = "continuous" if _kind(spec) == "discrete" else "discrete"
    if wrong in spec.action_space_kinds:
        pytest.skip(f"{name} acts in every action space")
    known: dict[str, Any] = {"name": ENV_BY_KIND[wrong]}
    if _is(name, OfflineStrategy):
        known |= {"env_type": "offline", "dataset_path": str(_nan_dataset(tmp_path))}
    with pytest.raises(ConfigError, match="action space"):  # a known env: refused by the manifest
        LocalTrainer({"name": name}, known, run_dir=tmp_path / "r", verbose=False)
    trainer = LocalTrainer(  # an env the manifest cannot see into: refused when building
        {"name": name},
        _nan_env_section(name, wrong, tmp_path),
        run_dir=tmp_path / "run",
        verbose=False,
        trust_code=True,  # the test's own entrypoint env
    )
    envs = trainer.strategy.make_envs(trainer.manifest, seed=0)
    try:
        with pytest.raises(ConfigError, match="action space"):
            trainer.strategy.build_population(
                trainer.spec, trainer.builder, envs, PopulationRuntime(1, 0, "cpu", 1000)
            )
    finally:
        envs.close()


@pytest.mark.parametrize("name", TRAINABLE)
def test_clone_is_an_independent_copy(name: str) -> None:
    spec = _spec(name)
    env = _env(spec)
    agent = _build(spec, env)
    clone = agent.clone(index=7)
    assert clone.index == 7 and type(clone) is type(agent)
    before = _params(clone)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(agent), strict=True))
    with torch.no_grad():
        for name_ in agent.network_names:
            for p in getattr(agent, name_).parameters():
                p.add_(1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(clone), strict=True))
    env.close()


@pytest.mark.parametrize("name", TRAINABLE)
def test_checkpoint_round_trips_with_weights_only(name: str, tmp_path: Path) -> None:
    from agilerl.algorithms.core.base import EvolvableAlgorithm

    spec = _spec(name)
    env = _env(spec)
    agent = _build(spec, env)
    path = tmp_path / "agent.pt"
    agent.save_checkpoint(path)
    state = torch.load(path, weights_only=True)
    assert set(agent.network_names) <= set(state["networks"])
    loaded = EvolvableAlgorithm.load(path)
    assert type(loaded) is type(agent)
    for a, b in zip(_params(agent), _params(loaded), strict=True):
        assert torch.equal(a, b)
    for obs in _obs(env):
        np.testing.assert_array_equal(greedy_action(loaded, obs), greedy_action(agent, obs))
    env.close()


def _by_hand_score(agent: Any, spec: Any, copies: int, max_steps: int, seed: int) -> float:
    """The mean greedy return ``test`` should report, computed one env copy at a time.

    A vector env reset with ``seed`` seeds copy ``i`` with ``seed + i``; a copy that
    finishes no episode within ``max_steps`` counts its partial return. A bandit scores
    the mean reward of ``max_steps`` greedy pulls from the reset with ``seed``.
    """
    if isinstance(env := _env(spec), BanditEnv):
        contexts, total = env.reset(seed=seed), 0.0
        for _ in range(max_steps):
            contexts, reward = env.step(greedy_action(agent, contexts))
            total += reward
        return total / max_steps
    env.close()
    returns = []
    for i in range(copies):
        single = gym.make(ENV_BY_KIND[_kind(spec)])
        obs, _ = single.reset(seed=seed + i)
        agent.reset_state()
        total, done, steps = 0.0, False, 0
        while not done and steps < max_steps:
            obs, reward, terminated, truncated, _ = single.step(greedy_action(agent, obs))
            total, done, steps = total + float(reward), terminated or truncated, steps + 1
        returns.append(total)
        single.close()
    return float(np.mean(returns))


@pytest.mark.parametrize("name", TRAINABLE)
def test_evaluation_in_its_env_records_fitness(name: str) -> None:
    """``test`` reports the greedy policy's mean return, as computed here by hand."""
    spec = _spec(name)
    env = _env(spec, num_envs=3)
    agent = _build(spec, env)
    score = agent.test(env, max_steps=60, loop=1, seed=0)
    assert agent.fitness == [score]
    assert score == pytest.approx(_by_hand_score(agent, spec, 3, 60, seed=0), rel=1e-5)
    env.close()


def _optimizer_lrs(agent: Any) -> set[float]:
    """The learning rates the agent's optimizers step with (torch optimizers or FlatAdam)."""
    lrs = set()
    for optimizer in agent._optimizers().values():
        groups = getattr(optimizer, "param_groups", None)
        if groups is not None:
            lrs |= {float(group["lr"]) for group in groups}
        else:
            lrs.add(float(optimizer.lr))
    return lrs


@pytest.mark.parametrize("name", TRAINABLE)
def test_spec_values_reach_the_agent(name: str) -> None:
    """Changed values reach the agent, and where one acts at build time, its effect shows."""
    spec_cls = MANIFEST_REGISTRY.get(name)
    changed = {}
    for field in ("batch_size", "learn_step", "gamma", "lr", "lr_actor", "lr_critic", "tau"):
        info = spec_cls.model_fields.get(field)
        if info is not None and info.default is not None:
            default = info.default
            changed[field] = default * 2 if isinstance(default, int) else default / 2
    spec = _spec(name, **changed)
    env = _env(spec)
    agent = _build(spec, env)
    for field, value in changed.items():
        assert getattr(agent.spec, field) == pytest.approx(value), field
    lrs = {changed[f] for f in ("lr", "lr_actor", "lr_critic") if f in changed}
    if agent.optimizer_names:  # the optimizers step with the new rates, not the defaults
        got = _optimizer_lrs(agent)
        assert lrs and all(any(lr == pytest.approx(g) for g in got) for lr in lrs), (lrs, got)
    if hasattr(agent, "steps_per_env"):  # on-policy: the rollout is the new learn_step
        assert agent.steps_per_env == math.ceil(changed["learn_step"] / agent.spec.num_envs)
        buffer = agent.create_rollout_buffer()
        assert buffer.capacity_per_env * buffer.num_envs >= changed["learn_step"]
    env.close()


def _bad_reward_trainer(name: str, kind: str, tmp_path: Path, huge: bool) -> LocalTrainer:
    """A short run in ``nan_envs`` (offline: on a dataset recorded there)."""
    spec_cls = MANIFEST_REGISTRY.get(name)
    on_policy = "update_epochs" in spec_cls.model_fields
    fields = {"batch_size": 16} | ({"learn_step": 32} if on_policy else {})
    return LocalTrainer(
        {"name": name, **fields},
        _nan_env_section(name, kind, tmp_path, huge=huge, num_envs=2),
        {"max_steps": 512, "evo_steps": 256, "eval_steps": 5, "checkpoint_steps": 256},
        network=TINY_LSTM if getattr(_spec(name), "recurrent", False) else TINY_NET,
        replay_buffer=(
            {"max_size": 1000}
            if spec_cls.off_policy or spec_cls.offline or spec_cls.bandit
            else None  # on-policy agents keep no replay memory (a section is refused)
        ),
        run_dir=tmp_path / "run",
        verbose=False,
        trust_code=True,  # the test's own entrypoint env
    )


def _kind_of(name: str) -> str:
    kinds = MANIFEST_REGISTRY.get(name).action_space_kinds
    return "discrete" if "discrete" in kinds else "continuous"


@pytest.mark.parametrize("name", TRAINABLE)
def test_a_nan_reward_stops_training_naming_its_source(name: str, tmp_path: Path) -> None:
    """A NaN reward from an env names the env step; in a dataset, the transition."""
    env = _env(_spec(name))
    agent = _build(_spec(name), env)  # skips an algorithm that is not implemented yet
    if _is(name, BanditStrategy):
        _bandit_bad_batch_is_refused(agent, env, float("nan"))
        return
    env.close()
    trainer = _bad_reward_trainer(name, _kind_of(name), tmp_path, huge=False)
    if not _is(name, OfflineStrategy):
        # A NaN reward from an env is the env's fault, named with the step (issue 10, case 20).
        with pytest.raises(ConfigError, match=r"nan_envs:\w+.*non-finite.*reward at env step"):
            trainer.train()
        return
    # NaN rewards in a dataset are refused when it is read, naming the file and transition
    with pytest.raises(ConfigError, match=r"dataset_path: .*nan\.npz: transition 40 has a non"):
        trainer.train()
    assert not (tmp_path / "run" / "metrics.csv").exists()


@pytest.mark.parametrize("name", TRAINABLE)
def test_a_non_finite_loss_stops_training_with_a_clear_error(name: str, tmp_path: Path) -> None:
    """Finite rewards of 1e30 pass every input guard; the loss overflows and the run stops."""
    env = _env(_spec(name))
    agent = _build(_spec(name), env)
    if _is(name, BanditStrategy):
        _bandit_bad_batch_is_refused(agent, env, 1e30)
        return
    env.close()
    trainer = _bad_reward_trainer(name, _kind_of(name), tmp_path, huge=True)
    with pytest.raises(ConfigError, match=r"training diverged.*non-finite") as error:
        trainer.train()
    _names_spec_fields(name, str(error.value))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed"


def _names_spec_fields(name: str, message: str) -> None:
    named = re.findall(r"algorithm\.(\w+)", message)
    fields = MANIFEST_REGISTRY.get(name).model_fields
    assert named and all(field in fields for field in named), message


def _bandit_bad_batch_is_refused(agent: Any, env: BanditEnv, reward: float) -> None:
    """A bandit's table rewards are 0 or 1, so the bad reward comes in a batch of pulls.

    The trainer turns the ``FloatingPointError`` into the "training diverged"
    error for every paradigm alike (checked above with a dataset's NaN rewards).
    """
    contexts = env.reset(seed=0)
    batch = {"obs": contexts[:2], "reward": np.array([1.0, reward], np.float32)}
    before = _params(agent)
    with pytest.raises(FloatingPointError, match="non-finite"):
        agent.learn(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, _params(agent), strict=True))
