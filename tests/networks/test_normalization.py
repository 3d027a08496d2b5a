"""``network.normalize_observations``: running observation statistics in front of the encoder.

What the agent's networks read, when the statistics move (learning only), that every
path (acting, learning, targets, evaluation, checkpoints, clones, mutations) uses them,
and the settings that are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from agilerl.algorithms import DDPG, DQN, PPO, SAC, TD3, RainbowDQN
from agilerl.algorithms.core.base import EvolvableAlgorithm
from agilerl.arena.models.networks import NetworkSpec
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.hpo.architecture import edit_mlp, rebuild_agent
from agilerl.networks.config import build_encoder, encoder_from_config, resolve_net_config
from agilerl.networks.normalization import OBS_CLIP, NormalizedEncoder
from agilerl.training.collect import collect_rollouts

BOX = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
NET = {
    "latent_dim": 8,
    "encoder_config": {"arch": "mlp", "hidden_size": [8]},
    "head_config": {"hidden_size": [8]},
    "normalize_observations": True,
}
ENVS = {
    DQN: "CartPole-v1",
    RainbowDQN: "CartPole-v1",
    PPO: "CartPole-v1",
    SAC: "Pendulum-v1",
    TD3: "Pendulum-v1",
    DDPG: "Pendulum-v1",
}
ALGORITHMS = list(ENVS)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)


SPEC = {PPO: {"num_envs": 2, "learn_step": 32}, TD3: {"policy_freq": 1}, DDPG: {"policy_freq": 1}}


def _agent(cls: type, **spec: Any) -> EvolvableAlgorithm:
    env = gym.make(ENVS[cls])
    fields = {"net_config": NET, "batch_size": 16, **SPEC.get(cls, {}), **spec}
    return cls(MANIFEST_REGISTRY.create(cls.__name__, **fields), env.observation_space,
               env.action_space)  # fmt: skip


def _norms(agent: EvolvableAlgorithm) -> dict[str, NormalizedEncoder]:
    """Every network's normalising encoder, by network name."""
    found = {}
    for name in agent.network_names:
        encoders = [m for m in getattr(agent, name).modules() if isinstance(m, NormalizedEncoder)]
        assert encoders, f"{name} does not normalise its observations"
        found[name] = encoders[0]
    return found


def _obs(env_id: str, n: int, scale: float = 5.0, shift: float = 3.0) -> np.ndarray:
    space = gym.make(env_id).observation_space
    space.seed(0)
    return (np.stack([space.sample() for _ in range(n)]) * scale + shift).astype(np.float32)


def _off_policy_batch(env_id: str, n: int = 16) -> dict[str, np.ndarray]:
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    env.action_space.seed(0)
    return {
        "obs": _obs(env_id, n),
        "action": np.stack([env.action_space.sample() for _ in range(n)]),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": _obs(env_id, n, shift=2.0),
        "done": np.zeros(n, np.float32),
    }


def _outputs(agent: EvolvableAlgorithm, obs: np.ndarray) -> np.ndarray:
    """What acting computes: PPO's values, DQN's Q values, else the greedy actions."""
    if isinstance(agent, PPO):
        return agent.policy_step(obs, greedy=True).value
    if type(agent) is DQN:
        return agent.get_q_values(obs)
    return np.asarray(agent.act(obs, greedy=True), dtype=np.float64)


def _learn(agent: EvolvableAlgorithm) -> None:
    """One learning call on data the statistics are fit on."""
    if isinstance(agent, PPO):
        env = gym.make_vec(
            ENVS[PPO], num_envs=2, vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )  # fmt: skip
        buffer = agent.create_rollout_buffer()
        collect_rollouts(agent, env, buffer, env.reset(seed=0)[0], n_steps=16)
        agent.learn(buffer)
        env.close()
    else:
        agent.learn(_off_policy_batch(ENVS[type(agent)]))


def test_inputs_are_normalised_with_hand_computed_running_statistics() -> None:
    encoder = build_encoder(BOX, resolve_net_config(NET, BOX))
    assert isinstance(encoder, NormalizedEncoder)
    batches = [
        torch.tensor([[1.0, 2.0, 3.0], [3.0, 6.0, 9.0]]),
        torch.tensor([[5.0, 10.0, 15.0]]),
    ]
    for batch in batches:  # a learning update: training mode, gradients recorded
        encoder(batch).sum().backward()
    # by hand: columns (1, 3, 5), (2, 6, 10), (3, 9, 15) -> means 3, 6, 9; population
    # variances 8/3, 32/3, 24
    mean, var = torch.tensor([3.0, 6.0, 9.0]), torch.tensor([8 / 3, 32 / 3, 24.0])
    stats = encoder.obs_norm
    assert stats.count.item() == 3
    torch.testing.assert_close(stats.mean, mean)
    torch.testing.assert_close(stats.var, var)
    obs = torch.tensor([[3.0, 6.0, 9.0], [4.0, 2.0, 9.0 + 1e4]])
    expected = torch.tensor([[0.0, 0.0, 0.0], [1 / (8 / 3) ** 0.5, -4 / (32 / 3) ** 0.5, OBS_CLIP]])
    with torch.no_grad():
        torch.testing.assert_close(encoder.normalize(obs), expected)
        torch.testing.assert_close(encoder(obs), encoder.encoder(expected))
    assert stats.count.item() == 3  # reading them changed nothing
    rebuilt = encoder_from_config(encoder.config)
    assert isinstance(rebuilt, NormalizedEncoder) and rebuilt.config == encoder.config


def test_multi_dimensional_boxes_are_normalised_per_element() -> None:
    space = gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32)
    encoder = build_encoder(space, resolve_net_config(NET, space))
    x = torch.randn(32, 2, 3) * 4.0 + 1.0
    encoder(x).sum().backward()
    torch.testing.assert_close(encoder.obs_norm.mean, x.reshape(32, -1).mean(0))
    assert encoder(x).shape == (32, 8)


@pytest.mark.parametrize("cls", ALGORITHMS, ids=lambda c: c.__name__)
def test_acting_and_evaluating_leave_the_statistics_alone(cls: type) -> None:
    agent = _agent(cls)
    norms = _norms(agent)
    obs = _obs(ENVS[cls], 8)
    agent.act(obs)
    agent.act(obs, greedy=True)
    if hasattr(agent, "get_action"):
        agent.get_action(obs)
    env = gym.make_vec(ENVS[cls], num_envs=2, vectorization_mode="sync")
    agent.test(env, max_steps=20)
    env.close()
    assert all(n.obs_norm.count.item() == 0 for n in norms.values())
    _learn(agent)
    # online networks fit them; a target copies its online network's at its own forward
    assert all(n.obs_norm.count.item() > 0 for k, n in norms.items() if "target" not in k)
    fitted = {name: n.obs_norm.mean.clone() for name, n in norms.items()}
    agent.act(obs)
    agent.test(gym.make_vec(ENVS[cls], num_envs=2, vectorization_mode="sync"), max_steps=20)
    for name, n in norms.items():
        torch.testing.assert_close(n.obs_norm.mean, fitted[name])


@pytest.mark.parametrize("cls", ALGORITHMS, ids=lambda c: c.__name__)
def test_targets_follow_and_every_path_reads_the_statistics(cls: type) -> None:
    agent = _agent(cls)
    _learn(agent)
    _learn(agent)
    norms = _norms(agent)
    for name, norm in norms.items():
        if name.endswith("_target"):
            online = norms[name.removesuffix("_target")]
            assert norm.obs_norm is not online.obs_norm
            with torch.no_grad():  # a target copies the online statistics when it runs
                norm(torch.from_numpy(_obs(ENVS[cls], 4)))
            torch.testing.assert_close(norm.obs_norm.mean, online.obs_norm.mean)
            torch.testing.assert_close(norm.obs_norm.var, online.obs_norm.var)
    # acting goes through the normalisation: with the statistics reset the outputs change
    obs = _obs(ENVS[cls], 64)
    before = _outputs(agent, obs)
    for norm in norms.values():
        norm.obs_norm.mean.zero_()
        norm.obs_norm.var.fill_(1.0)
    if hasattr(agent, "_fused_key"):
        agent._fused_key = None
    assert not np.allclose(before, _outputs(agent, obs))


def test_ppo_acts_and_learns_with_the_same_normalised_inputs() -> None:
    """The rollout's log-probs and values (fused acting path) equal the learning path's."""
    agent = _agent(PPO)
    _learn(agent)
    obs = _obs("CartPole-v1", 32)
    step = agent.policy_step(obs)
    with torch.no_grad():
        log_prob, _, value = agent.evaluate_actions(torch.from_numpy(obs),
                                                    torch.from_numpy(step.action))  # fmt: skip
    np.testing.assert_allclose(step.log_prob, log_prob.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(step.value, value.numpy(), rtol=1e-5, atol=1e-6)
    norm = agent.actor.encoder
    with torch.no_grad():
        inner = agent.critic.encoder.encoder(norm.normalize(torch.from_numpy(obs)))
        np.testing.assert_allclose(step.value, agent.critic.head(inner).squeeze(-1).numpy(),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("cls", [PPO, TD3], ids=lambda c: c.__name__)
def test_checkpoints_clones_and_mutations_carry_the_statistics(cls: type, tmp_path: Path) -> None:
    agent = _agent(cls)
    _learn(agent)
    stats = {name: n.obs_norm.state_dict() for name, n in _norms(agent).items()}
    path = tmp_path / "agent.pt"
    agent.save_checkpoint(path)
    loaded = EvolvableAlgorithm.load(path)
    clone = agent.clone()
    config, _ = edit_mlp(agent.net_config, "encoder", "add_layer", np.random.default_rng(0))
    mutated = rebuild_agent(agent, config, seed=0)
    assert mutated.net_config["encoder_config"]["hidden_size"] == [8, 8]
    for other in (loaded, clone, mutated):
        for name, norm in _norms(other).items():
            for key, value in norm.obs_norm.state_dict().items():
                torch.testing.assert_close(value, stats[name][key])
    obs = _obs(ENVS[cls], 16)
    np.testing.assert_array_equal(loaded.act(obs, greedy=True), agent.act(obs, greedy=True))


def test_the_fast_gradient_path_still_matches_autograd() -> None:
    """A normalised encoder is no MLP chain: the tape runs it through autograd."""
    from agilerl.networks.fastgrad import chain_of, gradient_mode

    grads = []
    for fast in (True, False):
        torch.manual_seed(0)
        agent = _agent(DQN)
        assert chain_of(agent.actor.encoder) is None
        with gradient_mode(fast):
            _learn(agent)
        grads.append([p.detach().clone() for p in agent.actor.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ({"encoder_config": {"arch": "simba"}}, "SimBa encoder normalises"),
        ({"encoder_config": {"arch": "cnn"}}, "normalize_images"),
        ({"encoder_config": {"arch": "lstm"}}, "recurrent"),
        ({"encoder_config": {"arch": "multiinput"}}, "Dict and Tuple"),
    ],
)
def test_encoders_it_cannot_act_on_are_refused(network: dict, message: str) -> None:
    NetworkSpec(**network)  # fine without it
    with pytest.raises(ValueError, match=rf"normalize_observations: .*{message}.*remove network"):
        NetworkSpec(**network, normalize_observations=True)


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"algorithm": {"name": "IPPO"}, "environment": {"name": "mpe2.simple_spread_v3"}},
         "IPPO builds its networks per agent group"),
        ({"algorithm": {"name": "PPO", "recurrent": True},
          "environment": {"name": "CartPole-v1"}}, "recurrent PPO"),
    ],
)  # fmt: skip
def test_paradigms_that_cannot_use_it_are_refused_at_validation(
    manifest: dict, message: str
) -> None:
    from agilerl.arena.models.manifest import TrainingManifest

    data = {**manifest, "network": {"normalize_observations": True}}
    with pytest.raises(Exception, match=rf"normalize_observations.*{message}"):
        TrainingManifest.from_dict(data)


def test_non_vector_observations_are_refused_when_built() -> None:
    image = gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)
    for space in (gym.spaces.Discrete(4), image):
        with pytest.raises(ValueError, match="normalize_observations"):
            build_encoder(space, resolve_net_config(NET | {"encoder_config": None}, space))


def test_an_env_without_vector_observations_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agilerl.arena.models import ConfigError
    from agilerl.arena.models.manifest import TrainingManifest
    from agilerl.launch.env_check import check_environment

    monkeypatch.setenv("AGILERL_CACHE_DIR", "off")
    manifest = TrainingManifest.from_dict(
        {
            "algorithm": {"name": "PPO"},
            "environment": {"name": "FrozenLake-v1"},
            "network": {"normalize_observations": True},
        }
    )
    with pytest.raises(ConfigError, match=r"normalize_observations .* FrozenLake-v1 observes"):
        check_environment(manifest)


def test_multi_agent_networks_built_from_python_refuse_it() -> None:
    from agilerl.algorithms.core.multi_agent import build_mlp

    build_mlp(4, 2, NetworkSpec())
    with pytest.raises(ValueError, match="multi-agent networks do not normalise observations"):
        build_mlp(4, 2, NetworkSpec(normalize_observations=True))
