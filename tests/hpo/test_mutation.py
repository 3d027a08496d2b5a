"""Mutations on real agents: every kind keeps agents able to act and learn."""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Callable, Iterator

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agilerl.algorithms import DQN, PPO, TD3, RainbowDQN
from agilerl.arena.models.algorithms.ddpg import DDPGSpec
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from agilerl.arena.models.algorithms.td3 import TD3Spec
from agilerl.arena.models.hpo import MutationSpec
from agilerl.hpo import Mutations
from agilerl.hpo.architecture import mlp_bounds
from agilerl.hpo.mutation import policy_weight_matrices
from agilerl.training.collect import collect_rollouts

SAME_STEP = {"autoreset_mode": AutoresetMode.SAME_STEP}
NET = {
    "latent_dim": 16,
    "min_latent_dim": 8,
    "max_latent_dim": 48,
    "encoder_config": {
        "hidden_size": [16],
        "layer_norm": False,
        "min_hidden_layers": 1,
        "max_hidden_layers": 3,
        "min_mlp_nodes": 8,
        "max_mlp_nodes": 64,
    },
    "head_config": {
        "hidden_size": [16],
        "layer_norm": False,
        "min_hidden_layers": 1,
        "max_hidden_layers": 2,
        "min_mlp_nodes": 8,
        "max_mlp_nodes": 48,
    },
}
RANGES = {
    "lr": (1e-4, 1e-2, 1.2, 0.8),
    "lr_actor": (1e-4, 1e-2, 1.2, 0.8),
    "lr_critic": (1e-4, 1e-2, 1.2, 0.8),
    "batch_size": (8, 64, 1.5, 0.75),
    "learn_step": (16, 64, 1.5, 0.75),
    "gamma": (0.9, 0.999, 1.001, 0.999),
    "tau": (1e-3, 1e-2, 1.2, 0.8),
    "clip_coef": (0.1, 0.3, 1.15, 0.85),
    "ent_coef": (0.001, 0.1, 1.2, 0.8),
    "update_epochs": (1, 3, 1.5, 0.75),
    "policy_freq": (1, 4, 1.5, 0.75),
}
ONLY = {
    "none": {"no_mut": 1.0},
    "rl_hp": {"rl_hp_mut": 1.0},
    "arch": {"arch_mut": 1.0, "new_layer": 0.5},
    "param": {"params_mut": 1.0},
    "act": {"act_mut": 1.0},
}


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- agents and one learning step each ------------------------------------------------
def _vec(env_id: str) -> gym.vector.VectorEnv:
    return gym.make_vec(env_id, 2, vectorization_mode="sync", vector_kwargs=SAME_STEP)


_ENVS: dict[str, gym.vector.VectorEnv] = {}


def _env(env_id: str) -> gym.vector.VectorEnv:
    if env_id not in _ENVS:
        _ENVS[env_id] = _vec(env_id)
    return _ENVS[env_id]


def _ppo(env_id: str = "CartPole-v1", **kwargs: object) -> PPO:
    env = _env(env_id)
    settings_ = {"net_config": NET, "learn_step": 32, "batch_size": 16, "update_epochs": 1}
    settings_.update(kwargs)
    return PPO(
        PPOSpec(), env.single_observation_space, env.single_action_space, num_envs=2, **settings_
    )


def _dqn(**kwargs: object) -> DQN:
    env = _env("CartPole-v1")
    settings_ = {"net_config": NET, **kwargs}
    return DQN(DQNSpec(), env.single_observation_space, env.single_action_space, **settings_)


def _td3(**kwargs: object) -> TD3:
    env = _env("Pendulum-v1")
    settings_ = {"net_config": NET, **kwargs}
    return TD3(TD3Spec(), env.single_observation_space, env.single_action_space, **settings_)


def _rainbow() -> RainbowDQN:
    env = _env("CartPole-v1")
    obs, act = env.single_observation_space, env.single_action_space
    return RainbowDQN(RainbowDQNSpec(), obs, act, net_config=NET, num_atoms=11, n_step=1)


AGENTS: dict[str, Callable[[], object]] = {
    "ppo_cartpole": lambda: _ppo("CartPole-v1"),
    "ppo_pendulum": lambda: _ppo("Pendulum-v1"),
    "dqn": _dqn,
    "td3": _td3,
    "rainbow": _rainbow,
}


def _obs(agent: object, n: int = 5, seed: int = 0) -> np.ndarray:
    space = agent.observation_space
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, (n, *space.shape)).astype(np.float32)


def _replay_batch(agent: object, size: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    obs_dim = agent.observation_space.shape[0]
    if isinstance(agent.action_space, spaces.Discrete):
        action = torch.randint(0, int(agent.action_space.n), (size,), generator=g)
    else:
        action = torch.rand(size, *agent.action_space.shape, generator=g) * 4 - 2
    return {
        "obs": torch.rand(size, obs_dim, generator=g) * 2 - 1,
        "action": action,
        "reward": torch.randn(size, generator=g),
        "next_obs": torch.rand(size, obs_dim, generator=g) * 2 - 1,
        "done": (torch.rand(size, generator=g) < 0.2).float(),
    }


def _capacity(buffer: object) -> int:
    return buffer.capacity_per_env * buffer.num_envs


def _act_and_learn(agent: object) -> None:
    """The agent acts (numpy obs) and takes a learning step; everything stays finite."""
    obs = _obs(agent)
    if isinstance(agent, PPO):
        action = agent.get_action(obs)[0]
        assert action.shape[0] == 5
        env = _env(
            "CartPole-v1" if isinstance(agent.action_space, spaces.Discrete) else "Pendulum-v1"
        )
        buffer = agent.create_rollout_buffer()
        assert _capacity(buffer) >= agent.learn_step
        start, _ = env.reset(seed=0)
        collect_rollouts(agent, env, buffer, start)
        losses = agent.learn(buffer)
        assert math.isfinite(losses["policy_loss"]) and math.isfinite(losses["value_loss"])
    else:
        action = agent.get_action(obs)
        assert action.shape[0] == 5
        for _ in range(2):  # TD3: the second call also steps the actor
            losses = agent.learn(_replay_batch(agent))
        assert all(math.isfinite(v) for v in losses.values() if isinstance(v, float))


def _greedy(agent: object, obs: np.ndarray) -> np.ndarray:
    if isinstance(agent, PPO):
        return agent.get_action(obs, greedy=True)[0]
    if isinstance(agent, DQN | RainbowDQN):
        with torch.no_grad():
            return agent.actor.forward(torch.as_tensor(obs)).numpy()
    return agent.get_action(obs, greedy=True)


def _check_fast_paths(agent: object, obs: np.ndarray) -> None:
    """Numpy acting paths (zero-copy weight views) agree with the torch modules."""
    with torch.no_grad():
        if isinstance(agent, DQN | TD3) and agent._numpy_chain is not None:
            expected = agent.actor.forward(torch.as_tensor(obs)).numpy()
            np.testing.assert_allclose(agent._numpy_chain.forward_numpy(obs), expected, atol=1e-5)
        if isinstance(agent, RainbowDQN) and agent._numpy_chains is not None:
            for noise in (False, True):
                expected = agent.get_q_values(obs, noise=noise)
                np.testing.assert_allclose(
                    agent._q_numpy(obs, noise), expected, rtol=1e-5, atol=1e-5
                )
        if isinstance(agent, PPO):
            params, value = agent._forward_all(torch.as_tensor(obs))
            fused = agent._fused_policy()
            if fused is not None:
                f_params, f_value = fused(torch.as_tensor(obs))
                torch.testing.assert_close(f_params, params, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(f_value, value, atol=1e-5, rtol=1e-5)


def _mutations(kind: str, seed: int = 0, **kwargs: object) -> Mutations:
    return Mutations(ONLY[kind], RANGES, rng=np.random.default_rng(seed), **kwargs)


def _check_net_bounds(agent: object) -> None:
    cfg = agent.net_config
    assert cfg["min_latent_dim"] <= cfg["latent_dim"] <= cfg["max_latent_dim"]
    for key in ("encoder_config", "head_config"):
        low_l, high_l, low_n, high_n = mlp_bounds(cfg[key])
        sizes = cfg[key]["hidden_size"]
        assert low_l <= len(sizes) <= high_l
        assert all(low_n <= h <= high_n for h in sizes)


# --- the operator ---------------------------------------------------------------------
def test_probabilities_are_normalised_and_zero_weights_dropped() -> None:
    m = Mutations({"no_mut": 2.0, "params_mut": 2.0, "arch_mut": 0.0, "new_layer": 0.3}, RANGES)
    assert m.kinds == ["None", "param"] and np.allclose(m.weights, [0.5, 0.5])
    assert m.new_layer == 0.3
    with pytest.raises(ValueError, match="Unknown mutation"):
        Mutations({"foo": 1.0}, RANGES)
    with pytest.raises(ValueError, match=">= 0"):
        Mutations({"no_mut": -1.0}, RANGES)
    with pytest.raises(ValueError, match="activation"):
        Mutations({"no_mut": 1.0}, RANGES, activation_selection=("Nope",))
    with pytest.raises(ValueError, match="min"):
        Mutations({"no_mut": 1.0}, {"lr": (1.0, 0.1, 1.2, 0.8)})


def test_kind_frequencies_follow_probabilities() -> None:
    m = Mutations({"no_mut": 0.75, "rl_hp_mut": 0.25}, RANGES, rng=np.random.default_rng(0))
    pop = [_dqn() for _ in range(4)]
    kinds = []
    for _ in range(50):
        pop = m.mutation(pop)
        kinds += [r["mutation"] for r in m.last_records]
    share = kinds.count("rl_hp") / len(kinds)
    assert set(kinds) == {"None", "rl_hp"} and 0.15 < share < 0.35


def test_no_mutation() -> None:
    agent = _dqn()
    before = {k: v.clone() for k, v in agent.actor.state_dict().items()}
    m = _mutations("none")
    [out] = m.mutation([agent])
    assert out is agent and agent.mut == "None"
    assert m.last_records == [{"index": agent.index, "mutation": "None", "detail": ""}]
    assert all(torch.equal(before[k], v) for k, v in agent.actor.state_dict().items())


def test_mutate_elite_false_leaves_first_agent_alone() -> None:
    pop = [_dqn(), _dqn(), _dqn()]
    for i, agent in enumerate(pop):
        agent.index = i
    lrs = [a.lr for a in pop]
    m = _mutations("rl_hp", mutate_elite=False)
    out = m.mutation(pop)
    assert out[0] is pop[0] and pop[0].lr == lrs[0] and pop[0].mut == "None"
    assert m.last_records[0]["mutation"] == "None"
    assert all(r["mutation"] == "rl_hp" for r in m.last_records[1:])
    m.mutation(pop, pre_training=True)
    assert m.last_records[0]["mutation"] == "rl_hp"


def test_kept_members_are_left_alone_and_the_others_mutate() -> None:
    pop = [_dqn(), _dqn(), _dqn(), _dqn()]
    for i, agent in enumerate(pop):
        agent.index = i
    before = [
        ({k: v.clone() for k, v in a.actor.state_dict().items()}, a.hyperparameters()) for a in pop
    ]
    m = _mutations("param", mutate_elite=True)
    out = m.mutation(pop, keep={1, 3})
    assert [r["mutation"] for r in m.last_records] == ["param", "None", "param", "None"]
    assert [r["detail"] for r in m.last_records][1::2] == ["kept place", "kept place"]
    for slot, (agent, (weights, hps)) in enumerate(zip(out, before, strict=True)):
        same = all(torch.equal(weights[k], v) for k, v in agent.actor.state_dict().items())
        assert same == (slot in (1, 3)) and agent.hyperparameters() == hps


# --- rl hyperparameters -----------------------------------------------------------------
@pytest.mark.parametrize("name", ["ppo_cartpole", "dqn", "td3"])
def test_rl_hp_mutation_stays_in_range_and_reaches_optimizer(name: str) -> None:
    agent = AGENTS[name]()
    m = _mutations("rl_hp", seed=1)
    start = {hp: getattr(agent, hp) for hp in RANGES if hp in agent.hp_names}
    seen = set()
    for _ in range(25):
        before = agent.hyperparameters()
        [agent] = m.mutation([agent])
        record = m.last_records[0]
        hp = agent.mut
        seen.add(hp)
        assert record["mutation"] == "rl_hp" and record["detail"].startswith(f"{hp} ")
        assert hp in agent.hp_names and hp in RANGES
        low, high, _, _ = RANGES[hp]
        value = getattr(agent, hp)
        assert value != before[hp]  # a mutation always moves its value
        # never pushed further outside the range than the value started
        assert min(low, start[hp]) <= value <= max(high, start[hp])
        if hp in ("batch_size", "learn_step", "update_epochs", "policy_freq"):
            assert type(value) is int
    if isinstance(agent, PPO):
        assert agent.optimizer.lr == agent.lr
        assert _capacity(agent.create_rollout_buffer()) >= agent.learn_step
    elif isinstance(agent, DQN):
        assert agent.optimizer.lr == agent.lr
    else:
        assert agent.actor_optimizer.lr == agent.lr_actor
        assert agent.critic_optimizer.lr == agent.lr_critic
    assert len(seen) >= 3
    _act_and_learn(agent)


def test_lr_mutation_changes_optimizer_and_out_of_range_value_moves_from_where_it_is() -> None:
    agent = _ppo(lr=1.0)  # far above the range: not snapped to its edge, never pushed further
    for seed in range(4):
        agent.set_hp(lr=1.0)
        m = Mutations({"rl_hp_mut": 1.0}, {"lr": RANGES["lr"]}, rng=np.random.default_rng(seed))
        m.mutation([agent])
        assert agent.lr == pytest.approx(1.0 * RANGES["lr"][3])
        assert agent.optimizer.param_groups[0]["lr"] == agent.lr
    td3 = _td3()
    m = Mutations(
        {"rl_hp_mut": 1.0}, {"lr_actor": RANGES["lr_actor"]}, rng=np.random.default_rng(0)
    )
    m.mutation([td3])
    assert td3.actor_optimizer.lr == td3.lr_actor != 1e-4


def test_rl_hp_with_no_matching_names_is_no_mutation() -> None:
    agent = _dqn()
    m = Mutations({"rl_hp_mut": 1.0}, {"clip_coef": (0.1, 0.3, 1.2, 0.8)})
    m.mutation([agent])
    assert agent.mut == "None" and m.last_records[0]["mutation"] == "None"


def test_learn_step_mutation_resizes_ppo_rollout_buffer() -> None:
    agent = _ppo()
    m = Mutations(
        {"rl_hp_mut": 1.0}, {"learn_step": (16, 64, 2.0, 0.5)}, rng=np.random.default_rng(0)
    )
    m.mutation([agent])
    assert agent.learn_step in (16, 64)
    assert _capacity(agent.create_rollout_buffer()) == agent.learn_step
    _act_and_learn(agent)


# --- architecture ---------------------------------------------------------------------
@pytest.mark.parametrize("name", list(AGENTS))
def test_architecture_mutation_respects_bounds_keeps_weights_and_learns(name: str) -> None:
    agent = AGENTS[name]()
    agent.steps, agent.fitness = 10, [1.0]
    m = _mutations("arch", seed=3)
    for _ in range(6):
        old = agent
        old_states = {n: copy.deepcopy(getattr(old, n).state_dict()) for n in old.network_names}
        hps = {h: getattr(old, h) for h in old.hp_names}
        [agent] = m.mutation([agent])
        record = m.last_records[0]
        assert record["mutation"] == "arch" and agent.mut == "arch" and agent is not old
        assert agent.net_config != old.net_config
        _check_net_bounds(agent)
        assert agent.steps == old.steps and agent.num_updates == old.num_updates
        assert agent.fitness == [1.0] and agent.index == old.index
        assert {h: getattr(agent, h) for h in agent.hp_names} == hps
        for net_name, old_state in old_states.items():
            new_state = getattr(agent, net_name).state_dict()
            key = next(k for k in new_state if k.endswith("encoder.mlp.linears.0.weight"))
            o, n = old_state[key], new_state[key]
            rows, cols = min(o.shape[0], n.shape[0]), min(o.shape[1], n.shape[1])
            assert torch.equal(o[:rows, :cols], n[:rows, :cols])
        _check_fast_paths(agent, _obs(agent))
        _act_and_learn(agent)


def test_architecture_mutation_without_legal_edit_is_no_mutation() -> None:
    net = copy.deepcopy(NET)
    for key in ("encoder_config", "head_config"):
        # the spec needs max_hidden_layers > 1, so two fixed layers leave no depth edit
        net[key].update(min_hidden_layers=2, max_hidden_layers=2, min_mlp_nodes=16)
        net[key].update(max_mlp_nodes=16, hidden_size=[16, 16])
    net.update(min_latent_dim=16, max_latent_dim=16)
    agent = _dqn(net_config=net)
    [out] = _mutations("arch").mutation([agent])
    assert out is agent and agent.mut == "None"


def test_new_layer_probability_controls_depth_edits() -> None:
    layer_only = Mutations(
        {"arch_mut": 1.0, "new_layer": 1.0}, RANGES, rng=np.random.default_rng(0)
    )
    nodes_only = Mutations(
        {"arch_mut": 1.0, "new_layer": 0.0}, RANGES, rng=np.random.default_rng(0)
    )
    for m, word in ((layer_only, "_layer"), (nodes_only, "_nodes")):
        agent = _dqn()
        for _ in range(3):
            [agent] = m.mutation([agent])
            assert word in m.last_records[0]["detail"]


# --- parameter noise --------------------------------------------------------------------
@pytest.mark.parametrize("name", list(AGENTS))
def test_param_mutation_changes_actions_not_shapes(name: str) -> None:
    agent = AGENTS[name]()
    obs = _obs(agent, n=64)
    before_actions = _greedy(agent, obs)
    shapes = {
        n: {k: v.shape for k, v in getattr(agent, n).state_dict().items()}
        for n in agent.network_names
    }
    weights = {k: p.detach().clone() for k, p in policy_weight_matrices(agent)}
    m = _mutations("param", seed=4, mutation_sd=0.5)
    [out] = m.mutation([agent])
    assert out is agent and agent.mut == "param" and m.last_records[0]["mutation"] == "param"
    after = dict(policy_weight_matrices(agent))
    changed = [k for k in weights if not torch.equal(weights[k], after[k])]
    assert changed
    for k in changed:
        frac = (weights[k] != after[k]).float().mean().item()
        assert 0 < frac < 0.5
    for n, net_shapes in shapes.items():
        assert {k: v.shape for k, v in getattr(agent, n).state_dict().items()} == net_shapes
    assert not np.array_equal(before_actions, _greedy(agent, obs))
    _check_fast_paths(agent, obs)
    if isinstance(agent, DQN | TD3):  # targets are left alone
        assert all(not p.requires_grad for p in agent.actor_target.parameters())
    _act_and_learn(agent)


def test_param_mutation_leaves_targets_and_norms_alone() -> None:
    agent = _td3()
    names = [k for k, _ in policy_weight_matrices(agent)]
    assert names and all(k.startswith("actor.") for k in names)
    net = copy.deepcopy(NET)
    net["encoder_config"]["layer_norm"] = True
    ppo = _ppo(net_config=net)
    assert all("norms" not in k for k, _ in policy_weight_matrices(ppo))


# --- activation -------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(AGENTS))
def test_activation_mutation_preserves_weights_exactly(name: str) -> None:
    agent = AGENTS[name]()
    states = {n: copy.deepcopy(getattr(agent, n).state_dict()) for n in agent.network_names}
    old_act = agent.net_config["head_config"]["activation"]
    m = _mutations("act", seed=5)
    [new] = m.mutation([agent])
    assert new.mut == "act" and new is not agent
    act = new.net_config["head_config"]["activation"]
    assert act != old_act and act in m.activation_selection
    assert new.net_config["encoder_config"]["activation"] == act
    for n, state in states.items():
        new_state = getattr(new, n).state_dict()
        assert all(torch.equal(state[k], new_state[k]) for k in state)
    _check_fast_paths(new, _obs(new))
    _act_and_learn(new)


def test_activation_mutation_with_single_current_option_is_no_mutation() -> None:
    agent = _dqn()
    m = Mutations({"act_mut": 1.0}, RANGES, activation_selection=("ReLU",))
    [out] = m.mutation([agent])
    assert out is agent and agent.mut == "None"


# --- reproducibility and state ------------------------------------------------------------
def _run(seed: int) -> tuple[list[list[dict]], list[dict]]:
    torch.manual_seed(0)
    pop = [_dqn(), _dqn(), _ppo()]
    for i, agent in enumerate(pop):
        agent.index = i
    probs = {"no_mut": 0.2, "arch_mut": 0.3, "new_layer": 0.5, "params_mut": 0.2, "act_mut": 0.1}
    m = Mutations({**probs, "rl_hp_mut": 0.2}, RANGES, rng=np.random.default_rng(seed))
    history = []
    for _ in range(4):
        pop = m.mutation(pop)
        history.append(m.last_records)
    return history, [a.actor.state_dict() for a in pop]


def test_same_seed_same_mutations() -> None:
    h1, s1 = _run(7)
    h2, s2 = _run(7)
    assert h1 == h2
    for a, b in zip(s1, s2, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    h3, _ = _run(8)
    assert h3 != h1


def test_state_dict_round_trip_continues_identically() -> None:
    m = Mutations({"rl_hp_mut": 1.0}, RANGES, rng=np.random.default_rng(0))
    m.mutation([_dqn()])
    buffer = io.BytesIO()
    torch.save(m.state_dict(), buffer)
    buffer.seek(0)
    other = Mutations({"rl_hp_mut": 1.0}, RANGES, rng=np.random.default_rng(99))
    other.load_state_dict(torch.load(buffer, weights_only=True))
    a, b = _dqn(), _dqn()
    for _ in range(5):
        m.mutation([a])
        other.mutation([b])
        assert m.last_records == other.last_records


# --- from_spec --------------------------------------------------------------------------
def test_from_spec_uses_algorithm_ranges_restricted_to_its_hyperparameters() -> None:
    spec = MutationSpec(rand_seed=3)
    m = Mutations.from_spec(spec, PPOSpec)
    assert set(m.rl_hp_ranges) <= set(PPO.hp_names)
    assert m.rl_hp_ranges["learn_step"] == (512.0, 8192.0, 1.5, 0.75)
    assert "tau" not in m.rl_hp_ranges and "lr_actor" not in m.rl_hp_ranges
    assert set(Mutations.from_spec(spec, DQNSpec()).rl_hp_ranges) == set(DQN.hp_names)
    ddpg = Mutations.from_spec(spec, DDPGSpec)
    assert {"lr_actor", "lr_critic", "policy_freq"} <= set(ddpg.rl_hp_ranges)
    assert "lr" not in ddpg.rl_hp_ranges
    assert m.kinds == ["None", "arch", "param", "rl_hp"] and m.new_layer == 0.2
    again = Mutations.from_spec(spec, PPOSpec)
    assert m.rng.random() == again.rng.random()
    seeded = Mutations.from_spec(spec, PPOSpec, rng_seed=4)
    assert seeded.rng.random() == np.random.default_rng(4).random()


def test_from_spec_with_explicit_selection() -> None:
    spec = MutationSpec(
        rl_hp_selection={
            "lr": {"min": 1e-4, "max": 1e-3, "grow_factor": 1.5, "shrink_factor": 0.5}
        },
        activation_selection=["Tanh", "ReLU"],
        mutation_sd=0.2,
        mutate_elite=False,
    )
    m = Mutations.from_spec(spec, PPOSpec)
    assert m.rl_hp_ranges == {"lr": (1e-4, 1e-3, 1.5, 0.5)}
    assert m.activation_selection == ("Tanh", "ReLU")
    assert m.mutation_sd == 0.2 and m.mutate_elite is False


# --- property test ----------------------------------------------------------------------
KINDS = st.sampled_from(["rl_hp", "arch", "param", "act", "none"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    algo=st.sampled_from(["ppo_cartpole", "ppo_pendulum", "dqn"]),
    kinds=st.lists(KINDS, min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_random_mutation_sequences_keep_agents_working(
    algo: str, kinds: list[str], seed: int
) -> None:
    torch.manual_seed(seed)
    agent = AGENTS[algo]()
    rng = np.random.default_rng(seed)
    for kind in kinds:
        m = Mutations(ONLY[kind], RANGES, rng=rng, activation_selection=("ReLU", "Tanh", "GELU"))
        [agent] = m.mutation([agent])
        assert agent.mut == ("None" if m.last_records[0]["mutation"] == "None" else agent.mut)
        _check_net_bounds(agent)
        for hp in agent.hp_names:
            if hp in RANGES and m.last_records[0]["detail"].startswith(f"{hp} "):
                low, high, _, _ = RANGES[hp]
                start = getattr(AGENTS[algo](), hp)
                assert min(low, start) <= getattr(agent, hp) <= max(high, start)
        _check_fast_paths(agent, _obs(agent))
        _act_and_learn(agent)


def test_image_encoder_only_head_mutates() -> None:
    image = spaces.Box(0, 255, (3, 12, 12), np.uint8)
    net = {
        "latent_dim": 16,
        "encoder_config": {
            "channel_size": [4],
            "kernel_size": [3],
            "stride_size": [2],
            "min_channel_size": 4,
        },
        "head_config": {"hidden_size": [16], "layer_norm": False},
    }
    agent = DQN(DQNSpec(), image, spaces.Discrete(3), net_config=net)
    encoder = copy.deepcopy(agent.net_config["encoder_config"])
    latent = agent.net_config["latent_dim"]
    m = Mutations(
        {"arch_mut": 1.0, "act_mut": 1.0, "new_layer": 0.5}, RANGES, rng=np.random.default_rng(0)
    )
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        [agent] = m.mutation([agent])
        assert m.last_records[0]["detail"].split()[0] in ("head", "activation")
        assert agent.net_config["encoder_config"] == encoder
        assert agent.net_config["latent_dim"] == latent
        obs = torch.randint(0, 256, (8, 3, 12, 12), generator=g, dtype=torch.uint8)
        assert agent.get_action(obs.numpy()).shape == (8,)
        batch = {
            "obs": obs,
            "action": torch.randint(0, 3, (8,), generator=g),
            "reward": torch.randn(8, generator=g),
            "next_obs": obs.flip(0),
            "done": torch.zeros(8),
        }
        assert math.isfinite(agent.learn(batch)["loss"])
