"""Recurrent PPO: LSTM encoder, hidden state through rollouts, BPTT sequences, eval, mutation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from agilerl.algorithms.ppo import PPO
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.components.recurrent_rollout_buffer import (
    BPTT_SEQUENCE_TYPES,
    RecurrentRolloutBuffer,
    sequence_stride,
)
from agilerl.envs.cartpole_novel import CARTPOLE_NOVEL_ID
from agilerl.hpo.architecture import edit_mlp, rebuild_agent
from agilerl.networks.config import build_encoder, resolve_net_config
from agilerl.networks.lstm import LSTMEncoder
from agilerl.training.collect_recurrent import collect_recurrent_rollouts

OBS = spaces.Box(-1.0, 1.0, (2,), np.float32)
LSTM = {"latent_dim": 16, "encoder_config": {"arch": "lstm", "hidden_state_size": 16}}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _env(num_envs: int = 4) -> gym.vector.VectorEnv:
    return gym.make_vec(
        CARTPOLE_NOVEL_ID,
        num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )


def _agent(env: gym.vector.VectorEnv, **fields: object) -> PPO:
    torch.manual_seed(0)
    spec = PPOSpec(
        recurrent=True, num_envs=env.num_envs, learn_step=64, batch_size=32, net_config=LSTM
    )
    return PPO(spec, env.single_observation_space, env.single_action_space, **fields)


def test_cartpole_novel_drops_the_velocities() -> None:
    full, novel = gym.make("CartPole-v1"), gym.make(CARTPOLE_NOVEL_ID)
    a, _ = full.reset(seed=3)
    b, _ = novel.reset(seed=3)
    assert novel.observation_space.shape == (2,)
    np.testing.assert_array_equal(b, a[[0, 2]])
    assert novel.spec.max_episode_steps == 500


def test_lstm_encoder_steps_equal_one_sequence_and_carry_state() -> None:
    torch.manual_seed(0)
    cfg = resolve_net_config({"encoder_config": {"arch": "lstm", "num_layers": 2}}, OBS)
    encoder = build_encoder(OBS, cfg)
    assert isinstance(encoder, LSTMEncoder) and encoder.state_shape == (4, 64)
    x = torch.randn(5, 3, 2)
    state = torch.randn(3, 4, 64)
    whole, last = encoder.sequence(x, state)
    s = state
    for t in range(5):
        out, s = encoder.step(x[t], s)
        torch.testing.assert_close(out, whole[t])
    torch.testing.assert_close(s, last)
    assert not torch.allclose(encoder.step(x[0], state)[0], encoder(x[0]))  # state matters
    assert LSTMEncoder.from_config(encoder.config).state_shape == encoder.state_shape


def test_recurrent_flag_infers_lstm_and_a_mismatch_is_refused() -> None:
    env = _env(2)
    agent = PPO(PPOSpec(recurrent=True, num_envs=2), OBS, env.single_action_space)
    assert agent.net_config["encoder_config"]["arch"] == "lstm"
    with pytest.raises(ValueError, match="arch: lstm"):
        PPO(PPOSpec(recurrent=True, net_config={"arch": "mlp"}), OBS, spaces.Discrete(2))
    with pytest.raises(ValueError, match="recurrent: true"):
        PPO(PPOSpec(net_config=LSTM), OBS, spaces.Discrete(2))


@pytest.mark.parametrize("kind", BPTT_SEQUENCE_TYPES)
def test_sequences_never_cross_episodes_and_start_from_the_stored_state(kind: str) -> None:
    T, N, L = 12, 2, 4
    buffer = RecurrentRolloutBuffer(T, N, OBS, spaces.Discrete(2), state_shape=(2, 3))
    done_at = {(3, 0), (8, 1)}
    for t in range(T):
        term = np.array([(t, n) in done_at for n in range(N)])
        obs = np.stack([[t, n] for n in range(N)]).astype(np.float32)
        state = np.full((N, 2, 3), 100.0 * t) + np.arange(N)[:, None, None]
        buffer.add(
            obs, np.zeros(N), np.zeros(N), np.ones(N), np.zeros(N), term, term & False, state=state
        )
    buffer.compute_returns_and_advantages(np.zeros(N))
    stride = sequence_stride(kind, L)
    windows, total = buffer.sequence_windows(L, stride)
    seen = np.zeros((T, N), dtype=int)
    for env, start, length in windows:
        assert 1 <= length <= L
        steps = range(start, start + length)
        assert not any((t, env) in done_at for t in steps[:-1])  # an episode end is last
        for t in steps:
            seen[t, env] += 1
    assert total == seen.sum()
    if kind == "chunked":
        assert (seen == 1).all()
    else:
        assert (seen >= 1).all() and seen.max() > 1
    batches = list(buffer.get_sequence_minibatches(16, L, kind))
    assert sum(int(b["mask"].sum()) for b in batches) == total
    for batch in batches:
        obs, mask = batch["observations"], batch["mask"]
        first_t, env = obs[0, :, 0].long(), obs[0, :, 1].long()
        expected = 100.0 * first_t + env
        torch.testing.assert_close(batch["states"][:, 0, 0], expected.float())
        assert batch["actions"].shape[0] == int(mask.sum())
        # real steps follow on from the sequence's first step
        times = obs[..., 0]
        offsets = torch.arange(obs.shape[0])[:, None].float()
        assert torch.equal((times - first_t.float())[mask], offsets.expand_as(times)[mask])


def test_collector_carries_the_state_and_zeroes_it_at_episode_ends() -> None:
    env = _env(4)
    agent = _agent(env, learn_step=256)
    buffer = agent.create_rollout_buffer()
    assert isinstance(buffer, RecurrentRolloutBuffer)
    obs, _ = env.reset(seed=0)
    obs, finished, _ = collect_recurrent_rollouts(agent, env, buffer, obs)
    states = buffer.states[: buffer.pos]
    done = (buffer.terminated | buffer.truncated)[: buffer.pos]
    assert finished and done.any()
    assert torch.all(states[0] == 0)  # the first rollout starts episodes
    after_done = states[1:][done[:-1]]
    assert torch.all(after_done == 0)
    assert states[1:][~done[:-1]].abs().sum(dim=(-1, -2)).min() > 0
    carried = buffer.rollout_state.clone()
    assert carried.abs().sum() > 0
    collect_recurrent_rollouts(agent, env, buffer, obs)
    torch.testing.assert_close(buffer.states[0], carried)  # the next rollout continues


@pytest.mark.parametrize(
    ("kind", "share"), [(kind, False) for kind in BPTT_SEQUENCE_TYPES] + [("chunked", True)]
)
def test_learn_updates_both_lstms_for_every_sequence_type(kind: str, share: bool) -> None:
    env = _env(4)
    agent = _agent(
        env,
        bptt_sequence_type=kind,
        max_seq_len=8,
        share_encoders=share,
        update_epochs=2,
        batch_size=128,
    )
    buffer = agent.create_rollout_buffer()
    obs, _ = env.reset(seed=1)
    collect_recurrent_rollouts(agent, env, buffer, obs)
    before = {n: p.detach().clone() for n, p in agent.critic.named_parameters()}
    before_actor = agent.actor.encoder.lstm.weight_hh_l0.detach().clone()
    losses = agent.learn(buffer)
    assert np.isfinite(losses["policy_loss"]) and losses["updates"] >= agent.update_epochs
    assert not torch.equal(before_actor, agent.actor.encoder.lstm.weight_hh_l0)
    changed = [n for n, p in agent.critic.named_parameters() if not torch.equal(before[n], p)]
    assert any("lstm" in n for n in changed)


def test_evaluation_resets_the_state_so_repeated_tests_agree() -> None:
    env = _env(2)
    agent = _agent(env)
    first = agent.test(env, loop=1, seed=5)
    agent.act(env.reset(seed=9)[0])  # leave a state behind
    assert agent.test(env, loop=1, seed=5) == first


def test_checkpoint_round_trip_keeps_the_recurrent_policy(tmp_path) -> None:
    env = _env(2)
    agent = _agent(env, max_seq_len=16)
    path = tmp_path / "agent.pt"
    agent.save_checkpoint(path)
    loaded = PPO.load(path)
    assert loaded.spec.recurrent and loaded.spec.max_seq_len == 16
    assert loaded.state_shape == agent.state_shape
    obs = env.reset(seed=2)[0]
    agent.reset_state()
    for _ in range(5):
        np.testing.assert_array_equal(agent.act(obs, greedy=True), loaded.act(obs, greedy=True))


def test_lstm_mutations_stay_in_bounds_and_keep_each_gate() -> None:
    rng = np.random.default_rng(0)
    net = {
        "latent_dim": 16,
        "encoder_config": {
            "arch": "lstm",
            "hidden_state_size": 16,
            "min_hidden_state_size": 8,
            "max_hidden_state_size": 32,
            "max_layers": 2,
        },
    }
    env = _env(2)
    agent = _agent(env, net_config=net)
    cfg = agent.net_config
    for _ in range(20):
        edited = edit_mlp(cfg, "encoder", "add_nodes", rng)
        if edited is None:
            break
        cfg = edited[0]
        assert 8 <= cfg["encoder_config"]["hidden_state_size"] <= 32
    assert cfg["encoder_config"]["hidden_state_size"] == 32
    assert edit_mlp(cfg, "encoder", "add_nodes", rng) is None
    grown = rebuild_agent(agent, cfg, seed=0)
    old, new = agent.actor.encoder.lstm, grown.actor.encoder.lstm
    for gate in range(4):
        torch.testing.assert_close(
            new.weight_hh_l0[gate * 32 : gate * 32 + 16, :16],
            old.weight_hh_l0[gate * 16 : (gate + 1) * 16],
        )
    layered = edit_mlp(agent.net_config, "encoder", "add_layer", rng)[0]
    assert layered["encoder_config"]["num_layers"] == 2
    assert edit_mlp(layered, "encoder", "add_layer", rng) is None
    assert rebuild_agent(agent, layered, seed=0).state_shape == (8, 16)


def test_manifest_pairs_recurrence_with_an_lstm_encoder() -> None:
    from agilerl.arena.models import ConfigError, TrainingManifest

    base = {"environment": {"name": CARTPOLE_NOVEL_ID}}
    with pytest.raises(ConfigError, match=r"network\.encoder_config\.arch: .*LSTM encoder"):
        TrainingManifest.from_dict(
            base | {"algorithm": {"name": "RecurrentPPO"}, "network": {"arch": "mlp"}}
        )
    with pytest.raises(ConfigError, match="recurrent_ppo"):
        TrainingManifest.from_dict(base | {"algorithm": {"name": "PPO"}, "network": LSTM})
    inferred = TrainingManifest.from_dict(base | {"algorithm": {"name": "RecurrentPPO"}})
    assert inferred.algorithm.recurrent


def test_shipped_lstm_manifest_trains_and_evaluates_from_its_run_dir(tmp_path) -> None:
    from pathlib import Path

    import yaml

    from agilerl.evaluate import evaluate_checkpoint
    from agilerl.trainer import LocalTrainer

    repo = Path(__file__).resolve().parents[2]
    manifest = yaml.safe_load((repo / "tests/manifests/ppo_lstm.yaml").read_text())
    manifest["training"] |= {"max_steps": 1024, "evo_steps": 512, "eval_loop": 1}
    run_dir = tmp_path / "run"
    LocalTrainer.from_manifest(manifest, run_dir=run_dir, seed=0, verbose=False).train()
    first = evaluate_checkpoint(run_dir, episodes=2)
    assert len(first.returns) == 2 and all(r > 0 for r in first.returns)
    assert evaluate_checkpoint(run_dir, episodes=2).returns == first.returns


def test_parameter_noise_leaves_the_lstm_alone() -> None:
    from agilerl.hpo.mutation import policy_weight_matrices

    names = [name for name, _ in policy_weight_matrices(_agent(_env(2)))]
    assert names and not any("lstm" in name for name in names)
    assert "actor.encoder.projection.weight" in names


def test_reset_state_zeroes_only_the_flagged_envs() -> None:
    env = _env(3)
    agent = _agent(env)
    agent.act(env.reset(seed=0)[0])
    before = agent._act_state.clone()
    agent.reset_state(np.array([False, True, False]))
    assert torch.all(agent._act_state[1] == 0)
    torch.testing.assert_close(agent._act_state[[0, 2]], before[[0, 2]])
    agent.reset_state()
    assert agent._act_state is None


def test_lstm_hidden_state_shrinks_no_further_than_its_minimum() -> None:
    rng = np.random.default_rng(1)
    encoder = {"arch": "lstm", "hidden_state_size": 16, "min_hidden_state_size": 8}
    cfg = _agent(_env(2), net_config={"latent_dim": 16, "encoder_config": encoder}).net_config
    sizes = []
    while (edited := edit_mlp(cfg, "encoder", "remove_nodes", rng)) is not None:
        cfg = edited[0]
        sizes.append(cfg["encoder_config"]["hidden_state_size"])
    assert sizes and all(8 <= s < 16 for s in sizes) and sizes[-1] == 8


def test_max_seq_len_mutates_within_the_spec_range_only_where_it_is_set() -> None:
    from agilerl.hpo.mutation import Mutations
    from agilerl.hpo.ranges import ranges_from_spec

    agent = _agent(_env(2))
    agent.set_hp(max_seq_len=16)
    ranges = ranges_from_spec(agent.spec)
    declared = PPOSpec.mutation_ranges()["max_seq_len"]
    assert ranges["max_seq_len"][:2] == (declared.low, declared.high)
    low, high = ranges["max_seq_len"][:2]
    mutations = Mutations(
        {"rl_hp_mut": 1.0}, {"max_seq_len": ranges["max_seq_len"]}, rng=np.random.default_rng(0)
    )
    seen = set()
    for start in (int(low) + 1, int(high) - 1):  # near each bound: the range clips the step
        agent.set_hp(max_seq_len=start)
        for _ in range(10):
            name, _detail = mutations.rl_hyperparam_mutation(agent)
            value = agent.spec.max_seq_len
            assert name == "max_seq_len" and isinstance(value, int) and low <= value <= high
            seen.add(value)
    assert {int(low), int(high)} <= seen and len(seen) > 4
    # a recurrent policy without a BPTT length (the whole rollout) has nothing to mutate
    agent.set_hp(max_seq_len=None)
    assert mutations.rl_hyperparam_mutation(agent) is None
