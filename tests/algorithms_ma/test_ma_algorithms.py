"""IPPO, MADDPG and MATD3: construction, agent groups, checkpoints, loops on real MPE envs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm, agent_group
from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.maddpg import MADDPG
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.arena.models.training import TrainingSpec
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.training.checkpointing import CheckpointManager
from agilerl.training.train_multi_agent import (
    evaluate_multi_agent,
    make_replay_buffer,
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)
from tests.algorithms_ma.ma_helpers import generations, run_context, table
from tests.hpo.operators import make_evolution

SL = "mpe2.simple_speaker_listener_v4"
SPREAD = "mpe2.simple_spread_v3"
ALGOS = [(IPPO, IPPOSpec), (MADDPG, MADDPGSpec), (MATD3, MATD3Spec)]
SMALL_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _env(continuous: bool, name: str = SL, num_envs: int = 2, **config):
    return make_vector_env(name, {"continuous_actions": continuous, **config}, num_envs=num_envs)


def test_agent_group_is_the_prefix_before_a_numeric_suffix() -> None:
    assert agent_group("speaker_0") == "speaker"
    assert agent_group("adversary_12") == "adversary"
    assert agent_group("agent") == "agent"
    assert agent_group("red_team") == "red_team"


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
@pytest.mark.parametrize("continuous", [False, True])
def test_act_returns_valid_env_actions_for_heterogeneous_agents(cls, spec_cls, continuous) -> None:
    env = _env(continuous, num_envs=3)
    agent = cls(spec_cls(net_config=SMALL_NET), env.observation_spaces, env.action_spaces)
    obs, _ = env.reset(seed=0)
    for greedy in (False, True):
        actions = agent.act(obs, greedy=greedy)
        for name, space in env.action_spaces.items():
            assert len(actions[name]) == 3
            for row in actions[name]:
                assert space.contains(np.asarray(row, dtype=space.dtype))
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), [(MADDPG, MADDPGSpec), (MATD3, MATD3Spec)])
@pytest.mark.parametrize("continuous", [False, True])
def test_numpy_acting_matches_torch_acting(cls, spec_cls, continuous) -> None:
    env = _env(continuous, num_envs=3)
    agent = cls(spec_cls(net_config=SMALL_NET), env.observation_spaces, env.action_spaces)
    obs, _ = env.reset(seed=0)
    as_tensors = {name: torch.as_tensor(value) for name, value in obs.items()}  # torch path
    fast, slow = agent.act(obs, greedy=True), agent.act(as_tensors, greedy=True)
    for name in env.agents:
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-5, atol=1e-6)
    if not continuous:  # sampled actions come from the agent's noise generator alone
        state = agent._noise_rng.bit_generator.state
        first = agent.act(obs)
        agent._noise_rng.bit_generator.state = state
        torch.manual_seed(123)  # torch's global RNG plays no part
        second = agent.act(obs)
        for name in env.agents:
            np.testing.assert_array_equal(first[name], second[name])
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_missing_spaces_or_index_raise(cls, spec_cls) -> None:
    env = _env(False)
    with pytest.raises(ValueError, match="observation_spaces"):
        cls(spec_cls(), None, env.action_spaces)
    with pytest.raises(ValueError, match="action_spaces"):
        cls(spec_cls(), env.observation_spaces, None)
    with pytest.raises(ValueError, match="index"):
        cls(spec_cls(), env.observation_spaces, env.action_spaces, index=None)
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_share_policies_gives_one_network_per_group(cls, spec_cls) -> None:
    env = _env(True, SPREAD, N=3)
    shared = cls(spec_cls(share_policies=True), env.observation_spaces, env.action_spaces)
    separate = cls(spec_cls(), env.observation_spaces, env.action_spaces)
    assert shared.policies == ["agent"] and set(shared.policy_of.values()) == {"agent"}
    assert list(shared.actors) == ["agent"]
    assert list(separate.actors) == ["agent_0", "agent_1", "agent_2"]
    # Heterogeneous groups stay apart even when sharing is on.
    sl = _env(True)
    grouped = cls(spec_cls(share_policies=True), sl.observation_spaces, sl.action_spaces)
    assert grouped.policies == ["speaker", "listener"]
    env.close()
    sl.close()


def test_share_policies_refuses_a_group_with_different_spaces() -> None:
    env = _env(True)
    obs = {
        "speaker_0": env.observation_spaces["speaker_0"],
        "speaker_1": env.observation_spaces["listener_0"],
    }
    act = {
        "speaker_0": env.action_spaces["speaker_0"],
        "speaker_1": env.action_spaces["listener_0"],
    }
    with pytest.raises(ValueError, match="share_policies"):
        IPPO(IPPOSpec(share_policies=True), obs, act)
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_per_group_network_sections_round_trip_and_are_used(cls, spec_cls, tmp_path) -> None:
    per_group = {
        "speaker": {**SMALL_NET, "latent_dim": 8},
        "listener": {**SMALL_NET, "latent_dim": 24},
    }
    spec = spec_cls(net_config=per_group, share_policies=True)
    data = spec.model_dump(mode="json")
    again = spec_cls.model_validate(data)
    assert again == spec and isinstance(again.net_config, dict)
    env = _env(False)
    agent = cls(spec, env.observation_spaces, env.action_spaces)
    widths = {
        p: [m.out_features for m in agent.actors[p] if isinstance(m, nn.Linear)]
        for p in agent.policies
    }
    assert widths["speaker"][1] == 8 and widths["listener"][1] == 24
    path = tmp_path / "agent.pt"
    agent.save_checkpoint(path)
    loaded = MultiAgentAlgorithm.load(path)
    assert loaded.spec.model_dump() == spec.model_dump()
    with pytest.raises(ValueError, match="none for policy"):
        cls(spec_cls(net_config={"speaker": SMALL_NET}), env.observation_spaces, env.action_spaces)
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_checkpoint_round_trip_with_weights_only_load(cls, spec_cls, tmp_path) -> None:
    env = _env(True)
    spec = spec_cls(net_config=SMALL_NET, batch_size=16)
    agent = cls(spec, env.observation_spaces, env.action_spaces, index=4)
    obs, _ = env.reset(seed=0)
    if cls is not IPPO:
        memory = make_replay_buffer(agent, 100, seed=0)
        for _ in range(10):
            action = agent.act(obs)
            nxt, rew, term, _, _ = env.step(action)
            memory.add(obs=obs, action=action, reward=rew, next_obs=nxt, done=term)
            obs = nxt
        for _ in range(3):
            agent.learn(memory.sample(16))
    agent.steps, agent.fitness, agent.scores = 123, [-50.0], [-60.0, -55.0]
    path = tmp_path / "ckpt.pt"
    agent.save_checkpoint(path)
    state = torch.load(path, weights_only=True)
    assert state["spec"] == spec.model_dump(mode="json")
    loaded = cls.load(path)
    assert type(loaded) is cls and loaded.index == 4 and loaded.steps == 123
    assert loaded.fitness == [-50.0] and loaded.scores == [-60.0, -55.0]
    assert loaded.num_updates == agent.num_updates
    for name, net in agent.nets.items():
        for key, value in net.state_dict().items():
            torch.testing.assert_close(loaded.nets[name].state_dict()[key], value)
    greedy = agent.act(obs, greedy=True)
    for name, value in loaded.act(obs, greedy=True).items():
        np.testing.assert_allclose(value, greedy[name])
    for name, opt in agent.opts.items():
        assert loaded.opts[name].state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_clone_is_independent_and_keeps_or_sets_index(cls, spec_cls) -> None:
    env = _env(False)
    agent = cls(spec_cls(net_config=SMALL_NET), env.observation_spaces, env.action_spaces, index=2)
    clone = agent.clone(7)
    assert clone.index == 7 and agent.clone().index == 2
    first = next(iter(clone.actors.values()))[0]
    with torch.no_grad():
        first.weight.add_(1.0)
    assert not torch.equal(first.weight, next(iter(agent.actors.values()))[0].weight)
    env.close()


def test_prebuilt_module_dicts_are_used_as_given() -> None:
    env = _env(False)
    actors = nn.ModuleDict({"speaker_0": nn.Linear(3, 3), "listener_0": nn.Linear(11, 5)})
    critics = nn.ModuleDict({"speaker_0": nn.Linear(3, 1), "listener_0": nn.Linear(11, 1)})
    agent = IPPO(
        IPPOSpec(),
        env.observation_spaces,
        env.action_spaces,
        actor_networks=actors,
        critic_networks=critics,
    )
    assert agent.actors is actors and agent.critics is critics
    obs, _ = env.reset(seed=0)
    assert set(agent.act(obs)) == {"speaker_0", "listener_0"}
    env.close()


def test_set_hp_validates_and_updates_learning_rates() -> None:
    env = _env(True)
    agent = MADDPG(MADDPGSpec(), env.observation_spaces, env.action_spaces)
    agent.set_hp(lr_actor=0.005)
    assert agent.spec.lr_actor == 0.005
    assert agent.opts["actor:speaker_0"].param_groups[0]["lr"] == 0.005
    with pytest.raises(ValueError):
        agent.set_hp(gamma=2.0)
    env.close()


def test_matd3_updates_actor_every_policy_freq_and_madddpg_every_step() -> None:
    env = _env(True)
    obs, _ = env.reset(seed=0)
    results = {}
    for cls, spec in ((MATD3, MATD3Spec(policy_freq=2)), (MADDPG, MADDPGSpec())):
        agent = cls(spec, env.observation_spaces, env.action_spaces)
        memory = make_replay_buffer(agent, 50, seed=0)
        action = agent.act(obs)
        nxt, rew, term, _, _ = env.step(action)
        memory.add(obs=obs, action=action, reward=rew, next_obs=nxt, done=term)
        results[cls.__name__] = [
            math.isnan(agent.learn(memory.sample(4))["actor_loss"]) for _ in range(4)
        ]
    assert results["MATD3"] == [True, False, True, False]
    assert results["MADDPG"] == [False] * 4
    env.close()


@pytest.mark.parametrize("rebuilt", [False, True])
def test_soft_update_moves_every_target_by_tau(rebuilt) -> None:
    env = _env(True)
    obs, _ = env.reset(seed=0)
    agent = MATD3(MATD3Spec(policy_freq=1, tau=0.25), env.observation_spaces, env.action_spaces)
    if rebuilt:  # a clone is rebuilt from a state dict: its targets are packed again
        agent = agent.clone()
    memory = make_replay_buffer(agent, 50, seed=0)
    action = agent.act(obs)
    nxt, rew, term, _, _ = env.step(action)
    memory.add(obs=obs, action=action, reward=rew, next_obs=nxt, done=term)
    pairs = [("actors", "actor_targets"), ("critics_1", "critics_1_targets")]
    pairs.append(("critics_2", "critics_2_targets"))
    before = {t: [p.detach().clone() for p in agent.nets[t].parameters()] for _, t in pairs}
    agent.learn(memory.sample(8))
    for online, target in pairs:
        params = zip(agent.nets[online].parameters(), agent.nets[target].parameters(), strict=True)
        for (new, moved), old in zip(params, before[target], strict=True):
            torch.testing.assert_close(moved, 0.75 * old + 0.25 * new.detach())
    env.close()


@pytest.mark.parametrize("mode", ["gumbel_softmax", "one_hot"])
def test_discrete_maddpg_actor_gets_gradients(mode) -> None:
    env = _env(False)
    agent = MADDPG(MADDPGSpec(discrete_actions=mode), env.observation_spaces, env.action_spaces)
    obs, _ = env.reset(seed=0)
    memory = make_replay_buffer(agent, 50, seed=0)
    action = agent.act(obs)
    nxt, rew, term, _, _ = env.step(action)
    memory.add(obs=obs, action=action, reward=rew, next_obs=nxt, done=term)
    before = [p.clone() for p in agent.actors.parameters()]
    agent.learn(memory.sample(8))
    after = list(agent.actors.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    env.close()


def _run(
    cls, spec_cls, seed: int, path, *, continuous: bool, name: str = SL, population: int = 1,
    **config,
):  # fmt: skip
    torch.manual_seed(seed)
    env = make_vector_env(name, {"continuous_actions": continuous, **config}, num_envs=2)
    eval_env = make_vector_env(name, {"continuous_actions": continuous, **config}, num_envs=2)
    spec = (
        spec_cls(net_config=SMALL_NET, learn_step=50, batch_size=25, update_epochs=2)
        if cls is IPPO
        else spec_cls(net_config=SMALL_NET, learn_step=4, batch_size=32)
    )
    agents = [
        cls(spec, env.observation_spaces, env.action_spaces, index=i) for i in range(population)
    ]
    kwargs: dict = dict(eval_env=eval_env)
    if population > 1:
        evolution = make_evolution(spec, population, seed, no_mut=0.5, rl_hp_mut=0.5)
        kwargs.update(tournament=evolution.tournament, mutation=evolution.mutation)
    run = run_context(path, seed)
    if cls is IPPO:
        training = TrainingSpec(max_steps=200, evo_steps=100)
        result = train_multi_agent_on_policy(agents, env, training=training, run=run, **kwargs)
    else:
        training = TrainingSpec(max_steps=200, evo_steps=100, learning_delay=50)
        result = train_multi_agent_off_policy(agents, env, training=training, run=run, **kwargs)
    env.close()
    eval_env.close()
    return result


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_simple_spread_runs_with_finite_values_and_evolves(cls, spec_cls, tmp_path) -> None:
    result = _run(cls, spec_cls, 0, tmp_path, continuous=True, name=SPREAD, population=2, N=3)
    rows = generations(tmp_path)
    # Rollouts are whole units: a mutated learn_step may stop a member short of max_steps.
    assert len(rows) >= 2 and 2 * 100 < result.total_steps <= 2 * 200
    assert len(table(tmp_path, "hpo.csv")) == 2 * (len(rows) - 1)  # no evolution after the last
    for generation in rows:
        assert len(generation) == 2
        for row in generation:
            fitness = float(row["fitness"])
            per_agent = [float(row[f"fitness_agent_{i}"]) for i in range(3)]
            assert math.isfinite(fitness) and sum(per_agent) == pytest.approx(fitness)
            assert math.isfinite(float(row["train_return"]))
    assert len({a.index for a in result.population}) == 2
    assert all(100 < a.steps <= 200 for a in result.population)
    population, fitnesses = result
    assert population is result.population and len(fitnesses) == 2
    assert result.best_fitness == max(float(r["fitness"]) for g in rows for r in g)
    assert result.status == "completed"
    for agent in result.population:
        for net in agent.nets.values():
            assert all(torch.isfinite(p).all() for p in net.parameters())


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_same_seed_gives_the_same_returns(cls, spec_cls, tmp_path) -> None:
    continuous = cls is not IPPO
    runs = [
        _run(cls, spec_cls, seed, tmp_path / str(i), continuous=continuous)
        for i, seed in enumerate((3, 3, 4))
    ]
    scores = [r.population[0].scores for r in runs]
    assert scores[0] == scores[1] and len(scores[0]) == 8
    assert scores[0] != scores[2]
    metrics = [[r["fitness"] for r in table(tmp_path / str(i))] for i in range(2)]
    assert metrics[0] == metrics[1] and len(metrics[0]) == 2


def test_evaluation_sums_or_averages_over_agents() -> None:
    env = _env(False, num_envs=2)
    agent = IPPO(IPPOSpec(net_config=SMALL_NET), env.observation_spaces, env.action_spaces)
    total, per_agent = evaluate_multi_agent(agent, env, loop=2, sum_scores=True, seed=5)
    mean, per_agent_again = evaluate_multi_agent(agent, env, loop=2, sum_scores=False, seed=5)
    assert per_agent == per_agent_again and set(per_agent) == {"speaker_0", "listener_0"}
    assert total == pytest.approx(sum(per_agent.values()))
    assert mean == pytest.approx(total / 2)
    assert agent.fitness == [total, mean]
    env.close()


def test_each_generation_is_recorded_and_checkpointed(tmp_path) -> None:
    env = _env(True, num_envs=2)
    agent = MATD3(
        MATD3Spec(net_config=SMALL_NET, batch_size=16), env.observation_spaces, env.action_spaces
    )
    train_multi_agent_off_policy(
        [agent], env, training=TrainingSpec(max_steps=100, evo_steps=50, learning_delay=20),
        eval_env=env, run=run_context(tmp_path, 1),
    )  # fmt: skip
    assert [row["generation"] for row in table(tmp_path)] == ["1", "2"]
    steps = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert steps == ["step_000000000050", "step_000000000100"]
    states, loop_state, _ = CheckpointManager(tmp_path / "checkpoints").load_latest()
    loaded = MultiAgentAlgorithm.from_state(states[0])
    assert loaded.steps == 100 and loaded.fitness == agent.fitness and len(loaded.fitness) == 2
    assert loop_state.total_steps == 100 and loop_state.generation == 2
    env.close()


def test_ippo_shared_critic_input_sees_every_observation() -> None:
    env = _env(False, num_envs=2)
    spec = IPPOSpec(net_config=SMALL_NET, shared_critic_input=True, learn_step=50, batch_size=25)
    agent = IPPO(spec, env.observation_spaces, env.action_spaces)
    assert agent.critics["speaker_0"][0].in_features == 3 + 11
    assert agent.critics["listener_0"][0].in_features == 3 + 11
    assert agent.actors["speaker_0"][0].in_features == 3
    training = TrainingSpec(max_steps=100, evo_steps=100)
    train_multi_agent_on_policy([agent], env, training=training, eval_env=env)
    assert agent.scores and all(math.isfinite(s) for s in agent.scores)
    env.close()


@pytest.mark.parametrize(("cls", "spec_cls"), ALGOS)
def test_shared_policies_train_on_simple_spread(cls, spec_cls) -> None:
    env = _env(cls is not IPPO, SPREAD, num_envs=2, N=3)
    if cls is IPPO:
        spec = spec_cls(net_config=SMALL_NET, share_policies=True, learn_step=50, batch_size=50)
    else:
        spec = spec_cls(net_config=SMALL_NET, share_policies=True, learn_step=2, batch_size=16)
    agent = cls(spec, env.observation_spaces, env.action_spaces)
    before = [p.clone() for p in agent.actors["agent"].parameters()]
    training = TrainingSpec(max_steps=100, evo_steps=100)
    if cls is IPPO:
        train_multi_agent_on_policy([agent], env, training=training)
    else:
        train_multi_agent_off_policy([agent], env, training=training)
    after = list(agent.actors["agent"].parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    assert all(torch.isfinite(p).all() for p in after)
    env.close()


def test_eval_steps_caps_an_evaluation_with_partial_returns() -> None:
    """training.eval_steps acts for multi-agent runs as for single-agent ones."""
    from agilerl.training.train_multi_agent import evaluate_multi_agent_episodes

    env = _env(False, num_envs=2)
    agent = IPPO(IPPOSpec(net_config=SMALL_NET), env.observation_spaces, env.action_spaces)
    whole = evaluate_multi_agent_episodes(agent, env, loop=1, seed=3)
    cut = evaluate_multi_agent_episodes(agent, env, loop=1, seed=3, max_steps=5)
    assert len(whole) == len(cut) == 2
    # five steps of rewards (all negative distances here) are less than a whole episode's
    for short, full in zip(cut, whole, strict=True):
        assert sum(short.values()) > sum(full.values())
    env.close()
