"""Learning on MPE speaker-listener within the issue's budgets (slow; fixed seeds).

Random policy: about -86 summed over agents per episode. Measured with the
conf/tuned/*speaker_listener* presets, seed 0, CPU, one torch thread: IPPO
(discrete, 98,304 env steps = 48 rollouts) -32.4 over the last 10k steps
(~45 s); MADDPG (continuous, 60k env steps, one update per vector step)
-20.1 (~200 s on a loaded machine); MATD3 with the same settings passes too
(-18.7 with one update per 4 env steps). Thresholds from the issue: -60 / -55.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.maddpg import MADDPG
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.maddpg import MADDPGSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.training.train_multi_agent import (
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)

pytestmark = pytest.mark.slow
TUNED = Path(__file__).resolve().parents[2] / "conf" / "tuned"


def _tuned(name: str) -> dict:
    return yaml.safe_load((TUNED / f"{name}.yaml").read_text())


def _spec(spec_cls, preset: dict):
    # a preset's network is under tuned_network (see agilerl.launch.compose), or network
    net = preset.get("tuned_network", preset.get("network"))
    return spec_cls.model_validate({**preset["algorithm"], "net_config": net})


def _recent_return(agent, steps: int) -> float:
    """Mean summed training return of the episodes of the last ``steps`` env steps
    (speaker-listener episodes are 25 steps long)."""
    return float(np.mean(agent.scores[-(steps // 25) :]))


def test_ippo_learns_discrete_speaker_listener_within_100k_steps() -> None:
    torch.set_num_threads(1)
    preset = _tuned("ippo_mpe_simple_speaker_listener")
    env = make_vector_env(
        "mpe2.simple_speaker_listener_v4", {"continuous_actions": False}, num_envs=8
    )
    torch.manual_seed(0)
    agent = IPPO(_spec(IPPOSpec, preset), env.observation_spaces, env.action_spaces)
    train_multi_agent_on_policy([agent], env, max_steps=100_000, evo_steps=10_000)
    env.close()
    assert agent.steps <= 100_000
    assert _recent_return(agent, 10_000) > -60


@pytest.mark.parametrize(
    ("cls", "spec_cls", "preset"),
    [
        (MADDPG, MADDPGSpec, "maddpg_mpe_simple_speaker_listener_continuous"),
        (MATD3, MATD3Spec, "matd3_mpe_simple_speaker_listener_continuous"),
        # the README command and experiment=matd3_speaker_listener (discrete actions)
        (MATD3, MATD3Spec, "matd3_mpe_simple_speaker_listener"),
    ],
)
def test_off_policy_learns_speaker_listener_within_60k_steps(cls, spec_cls, preset) -> None:
    torch.set_num_threads(1)
    conf = _tuned(preset)
    env = make_vector_env(
        "mpe2.simple_speaker_listener_v4",
        {"continuous_actions": preset.endswith("_continuous")},
        num_envs=8,
    )
    torch.manual_seed(0)
    agent = cls(_spec(spec_cls, conf), env.observation_spaces, env.action_spaces)
    train_multi_agent_off_policy(
        [agent],
        env,
        max_steps=60_000,
        evo_steps=6_000,
        memory_size=conf["replay_buffer"]["max_size"],
        learning_delay=conf["training"]["learning_delay"],
    )
    env.close()
    assert agent.steps <= 60_000
    assert _recent_return(agent, 10_000) > -55
