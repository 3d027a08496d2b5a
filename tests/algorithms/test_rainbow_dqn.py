"""Rainbow DQN: C51 projection, noisy layers, dueling head, n-step/PER learning, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from agilerl.algorithms import RainbowDQN
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from agilerl.networks.q_networks import NoisyLinear, RainbowQNetwork, project_distribution

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
NET = {
    "latent_dim": 16,
    "encoder_config": {"hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)


def _agent(**kwargs: object) -> RainbowDQN:
    settings_ = {"net_config": NET, "num_atoms": 11, "v_min": -10.0, "v_max": 10.0}
    settings_.update(kwargs)
    return RainbowDQN(RainbowDQNSpec(), OBS, spaces.Discrete(3), **settings_)


def _batch(size: int = 16, seed: int = 0, n_steps: int | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batch = {
        "obs": torch.rand(size, 4, generator=g) * 2 - 1,
        "action": torch.randint(0, 3, (size,), generator=g),
        "reward": torch.randn(size, generator=g),
        "next_obs": torch.rand(size, 4, generator=g) * 2 - 1,
        "done": (torch.rand(size, generator=g) < 0.2).float(),
    }
    if n_steps is not None:
        batch["n_steps"] = torch.full((size,), n_steps)
    return batch


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


# --- C51 projection -----------------------------------------------------------------------
SUPPORT = torch.arange(5.0)  # atoms 0, 1, 2, 3, 4


def _project(probs: list[list[float]], reward: list[float], discount: list[float]) -> torch.Tensor:
    return project_distribution(
        torch.tensor(probs, dtype=torch.float32),
        torch.tensor(reward),
        torch.tensor(discount),
        SUPPORT,
    )


def test_projection_hand_computed_cases() -> None:
    # a point mass at z=2 shifted by 0.5 splits evenly between atoms 2 and 3
    torch.testing.assert_close(
        _project([[0, 0, 1, 0, 0]], [0.5], [1.0]), torch.tensor([[0, 0, 0.5, 0.5, 0]])
    )
    # uniform, Tz = 1 + 0.5 z = [1, 1.5, 2, 2.5, 3]
    torch.testing.assert_close(
        _project([[0.2] * 5], [1.0], [0.5]), torch.tensor([[0, 0.3, 0.4, 0.3, 0]])
    )
    # terminal (discount 0): all mass at r = 1.25 -> 0.75 on atom 1, 0.25 on atom 2
    torch.testing.assert_close(
        _project([[0.1, 0.2, 0.3, 0.2, 0.2]], [1.25], [0.0]),
        torch.tensor([[0, 0.75, 0.25, 0, 0]]),
    )
    # clamping to the support's ends, including exact hits of v_max
    torch.testing.assert_close(
        _project([[0.2] * 5], [10.0], [1.0]), torch.tensor([[0, 0, 0, 0, 1.0]])
    )
    torch.testing.assert_close(
        _project([[0.2] * 5], [-10.0], [1.0]), torch.tensor([[1.0, 0, 0, 0, 0]])
    )
    torch.testing.assert_close(
        _project([[0, 0, 0, 0, 1]], [0.0], [1.0]), torch.tensor([[0, 0, 0, 0, 1.0]])
    )
    # a non-unit support spacing (v_min -1, v_max 1, atoms 5: spacing 0.5)
    support = torch.linspace(-1.0, 1.0, 5)
    out = project_distribution(
        torch.tensor([[0, 0, 1.0, 0, 0]]), torch.tensor([0.2]), torch.tensor([1.0]), support
    )
    torch.testing.assert_close(out, torch.tensor([[0, 0, 0.6, 0.4, 0]]))
    # several rows at once stay independent
    two = _project([[0, 0, 1, 0, 0], [0.2] * 5], [0.5, 1.0], [1.0, 0.5])
    torch.testing.assert_close(two, torch.tensor([[0, 0, 0.5, 0.5, 0], [0, 0.3, 0.4, 0.3, 0]]))


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(
        st.tuples(
            st.lists(st.floats(0.0, 1.0), min_size=7, max_size=7).filter(lambda p: sum(p) > 0.1),
            st.floats(-3.0, 3.0),
            st.floats(0.0, 1.0),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_projection_conserves_mass_and_mean(data: list) -> None:
    support = torch.linspace(-6.0, 6.0, 7, dtype=torch.float64)
    probs = torch.tensor([p for p, _, _ in data], dtype=torch.float64)
    probs = probs / probs.sum(1, keepdim=True)
    reward = torch.tensor([r for _, r, _ in data], dtype=torch.float64)
    discount = torch.tensor([d for _, _, d in data], dtype=torch.float64)
    out = project_distribution(probs, reward, discount, support)
    assert torch.all(out >= 0)
    torch.testing.assert_close(out.sum(1), torch.ones(len(data), dtype=torch.float64))
    # the mean is preserved when the shifted support stays inside [v_min, v_max]
    tz = reward[:, None] + discount[:, None] * support[None]
    expected = (probs * tz.clamp(-6.0, 6.0)).sum(1)
    torch.testing.assert_close(out @ support, expected)


# --- networks -----------------------------------------------------------------------------
def test_noisy_linear_noise_and_determinism() -> None:
    layer = NoisyLinear(5, 4, std_init=0.5)
    x = torch.randn(3, 5)
    a, b = layer(x), layer(x)
    assert torch.equal(a, b)  # the sample only changes on reset_noise
    layer.reset_noise()
    c = layer(x)
    assert not torch.allclose(a, c)
    mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    assert torch.equal(layer(x, noise=False), mean)
    # factorised noise: the weight noise is an outer product
    assert torch.linalg.matrix_rank(layer.weight_epsilon).item() == 1


def test_rainbow_network_outputs_distributions() -> None:
    net = RainbowQNetwork(OBS, spaces.Discrete(3), NET, num_atoms=11, v_min=-1.0, v_max=1.0)
    obs = torch.randn(6, 4)
    probs = net(obs)
    assert probs.shape == (6, 3, 11)
    torch.testing.assert_close(probs.sum(-1), torch.ones(6, 3))
    torch.testing.assert_close(net(obs, log=True).exp(), probs)
    q = net.q_values(obs)
    assert q.shape == (6, 3) and torch.all(q.abs() <= 1.0 + 1e-6)
    # dueling: advantages are centred over actions
    logits = net.logits(obs)
    assert logits.shape == (6, 3, 11)
    rebuilt = RainbowQNetwork.from_config(net.config)
    rebuilt.load_state_dict(net.state_dict())
    torch.testing.assert_close(rebuilt(obs, noise=False), net(obs, noise=False))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"num_atoms": 1}, "num_atoms"), ({"v_min": 5.0, "v_max": 5.0}, "v_min")],
)
def test_invalid_support(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _agent(**kwargs)


def test_actions_noise_and_greedy() -> None:
    agent = RainbowDQN(
        RainbowDQNSpec(), OBS, spaces.Discrete(4, start=1), net_config=NET, noise_std=2.0
    )
    obs = np.random.default_rng(0).uniform(-1, 1, (200, 4)).astype(np.float32)
    action = agent.get_action(obs)
    assert action.shape == (200,) and set(action.tolist()) <= {1, 2, 3, 4}
    # epsilon is ignored: noisy layers explore
    assert np.array_equal(agent.get_action(obs, epsilon=1.0), action)
    greedy = agent.get_action(obs, greedy=True)
    noisy_q = agent.get_q_values(obs, noise=True)
    clean_q = agent.get_q_values(obs, noise=False)
    agent.reset_noise()
    assert np.array_equal(agent.get_action(obs, greedy=True), greedy)
    assert np.array_equal(agent.get_q_values(obs, noise=False), clean_q)
    assert not np.allclose(agent.get_q_values(obs, noise=True), noisy_q)
    # strong noise changes some actions between noise samples
    changed = False
    for _ in range(5):
        agent.reset_noise()
        changed |= not np.array_equal(agent.get_action(obs), action)
    assert changed


# --- learning -----------------------------------------------------------------------------
def test_learn_returns_priorities_and_moves_target_by_tau() -> None:
    agent = _agent(tau=0.1, lr=1e-2, prior_eps=1e-3)
    target_before = _params(agent.actor_target)
    online_before = _params(agent.actor)
    out = agent.learn(_batch(), weights=torch.linspace(0.5, 1.0, 16))
    assert isinstance(out["loss"], float) and math.isfinite(out["loss"])
    assert isinstance(out["q_mean"], float)
    priorities = out["priorities"]
    assert isinstance(priorities, np.ndarray) and priorities.shape == (16,)
    assert np.all(priorities >= 1e-3)
    online_after = _params(agent.actor)
    assert any(not torch.equal(a, b) for a, b in zip(online_before, online_after, strict=True))
    for t0, o1, t1 in zip(
        target_before, online_after, agent.actor_target.parameters(), strict=True
    ):
        torch.testing.assert_close(t1, 0.9 * t0 + 0.1 * o1)


def test_importance_weights_scale_the_loss() -> None:
    agent = _agent(noise_std=0.0, lr=0.0)
    batch = _batch()
    plain = agent.learn(batch)
    halved = agent.learn(batch, weights=torch.full((16,), 0.5))
    assert halved["loss"] == pytest.approx(plain["loss"] / 2, rel=1e-5)
    np.testing.assert_allclose(halved["priorities"], plain["priorities"], rtol=1e-5)
    # priorities are the per-sample losses: their mean is the unweighted loss
    assert np.mean(plain["priorities"] - agent.prior_eps) == pytest.approx(plain["loss"], rel=1e-4)


def test_n_step_and_combined_losses() -> None:
    base = _agent(noise_std=0.0, n_step=3, gamma=0.9)
    one, n_step = _batch(seed=1), _batch(seed=1, n_steps=3)
    n_step["reward"] = n_step["reward"] * 2
    n_step["next_obs"] = torch.rand(16, 4) * 2 - 1
    one_loss = base.clone().learn(one)["loss"]
    # without n_steps the n-step batch spans n_step steps
    implicit = {k: v for k, v in n_step.items() if k != "n_steps"}
    n_loss = base.clone().learn(one, n_step_batch=n_step)["loss"]
    assert base.clone().learn(one, n_step_batch=implicit)["loss"] == pytest.approx(n_loss)
    assert n_loss != pytest.approx(one_loss)
    combined = base.clone()
    combined.combined_reward = True
    assert combined.learn(one, n_step_batch=n_step)["loss"] == pytest.approx(one_loss + n_loss)


def test_numpy_q_values_match_torch() -> None:
    plain = _agent()
    layer_norm = _agent(
        net_config={**NET, "head_config": {"hidden_size": [16], "layer_norm": True}}
    )
    obs = np.random.default_rng(3).uniform(-1, 1, (32, 4)).astype(np.float32)
    for agent in (plain, layer_norm):
        assert agent._numpy_chains is not None
        for noise in (False, True):
            np.testing.assert_allclose(
                agent._q_numpy(obs, noise), agent.get_q_values(obs, noise=noise), atol=1e-5
            )
        assert agent.get_action(obs).shape == (32,)
        assert math.isfinite(agent.learn(_batch())["loss"])


def test_nan_guard() -> None:
    agent = _agent()
    before = _params(agent.actor)
    batch = _batch()
    batch["reward"][0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"loss.*update 1"):
        agent.learn(batch)
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters(), strict=True))
    # an infinite reward is clamped onto the support (C51 semantics), not an error
    batch["reward"][0] = float("inf")
    assert math.isfinite(agent.learn(batch)["loss"])


# --- cloning, checkpoints, builder --------------------------------------------------------
def test_spec_defaults_and_validated_overrides() -> None:
    agent = RainbowDQN(RainbowDQNSpec(), OBS, spaces.Discrete(2), net_config=NET)
    assert (agent.learn_step, agent.tau, agent.max_grad_norm) == (4, 0.005, 10.0)
    assert (agent.num_atoms, agent.n_step, agent.lr) == (51, 3, 1e-4)
    agent.lr = 3e-4
    assert agent.optimizer.lr == pytest.approx(3e-4)
    with pytest.raises(ValueError, match="prior_eps"):
        agent.prior_eps = 0.0
    assert agent.get_action(np.zeros((2, 4), np.float32)).shape == (2,)
