"""The multi-agent loops resume exactly from a generation's state (agents, RNGs, loop, buffer)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.training.checkpointing import rng_state, set_rng_state
from agilerl.training.train_multi_agent import (
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)
from tests.hpo.operators import make_evolution

SMALL_NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}
CASES = {
    "matd3_ou_noise": (
        MATD3,
        MATD3Spec(net_config=SMALL_NET, batch_size=16, learn_step=8, O_U_noise=True),
    ),
    "ippo": (IPPO, IPPOSpec(net_config=SMALL_NET, learn_step=50, batch_size=25, update_epochs=1)),
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _train(name: str, max_steps: int, resume: dict | None = None, agents=None, hook=None):
    cls, spec = CASES[name]
    continuous = cls is MATD3
    env = make_vector_env("mpe2.simple_speaker_listener_v4", {"continuous_actions": continuous}, 2)
    eval_env = make_vector_env(
        "mpe2.simple_speaker_listener_v4", {"continuous_actions": continuous}, 2
    )
    # rates only: a mutated learn_step would change how many whole rollouts fit a generation
    rates = {"min": 1e-5, "max": 1e-1}
    selection = {
        name: rates for name in ("lr", "lr_actor", "lr_critic") if name in type(spec).model_fields
    }
    evolution = make_evolution(spec, 2, 1, selection=selection, rl_hp_mut=1.0)
    if resume is not None:
        evolution.tournament.load_state_dict(resume.pop("tournament"))
        evolution.mutation.load_state_dict(resume.pop("mutation"))
    if agents is None:
        torch.manual_seed(0)
        agents = [cls(spec, env.observation_spaces, env.action_spaces, index=i) for i in range(2)]
    kwargs: dict[str, Any] = dict(
        max_steps=max_steps,
        evo_steps=50,
        eval_env=eval_env,
        seed=7,
        evolution=evolution,
        resume=resume,
        on_generation=hook and (lambda result: hook(result, evolution)),
    )
    train = train_multi_agent_on_policy if cls is IPPO else train_multi_agent_off_policy
    extra = {} if cls is IPPO else {"learning_delay": 20}
    result = train(agents, env, **kwargs, **extra)
    env.close()
    eval_env.close()
    return result


@pytest.mark.parametrize("name", list(CASES))
def test_resumed_loop_equals_the_uninterrupted_loop(name: str) -> None:
    whole = _train(name, 150)
    saved: dict[str, Any] = {}

    def checkpoint(result, evolution) -> None:
        saved["agents"] = [copy.deepcopy(a.state_dict()) for a in result.population]
        saved["rng"] = rng_state()
        saved["resume"] = {
            **copy.deepcopy(result.loop_state),
            "tournament": evolution.tournament.state_dict(),
            "mutation": evolution.mutation.state_dict(),
            "memory": copy.deepcopy(result.memory.state_dict()) if result.memory else None,
        }

    _train(name, 100, hook=checkpoint)
    assert saved["resume"]["generation"] == 2 and saved["resume"]["env_steps"] == 200
    cls, spec = CASES[name]
    env = make_vector_env("mpe2.simple_speaker_listener_v4", {"continuous_actions": cls is MATD3})
    torch.manual_seed(123)  # fresh agents are overwritten by the checkpoint
    agents = [cls(spec, env.observation_spaces, env.action_spaces, index=i) for i in range(2)]
    env.close()
    for agent, state in zip(agents, saved["agents"], strict=True):
        agent.load_state_dict(state)
    set_rng_state(saved["rng"])
    resumed = _train(name, 150, resume=saved["resume"], agents=agents)
    assert resumed.env_steps == whole.env_steps == 300
    assert [r["fitness"] for r in resumed.history] == [r["fitness"] for r in whole.history[2:]]
    assert [r["mutations"] for r in resumed.history] == [r["mutations"] for r in whole.history[2:]]
    for a, b in zip(whole.population, resumed.population, strict=True):
        assert a.index == b.index and a.steps == b.steps and a.scores == b.scores
        assert a.spec == b.spec
        for net_name, net in a.nets.items():
            for (key, x), y in zip(
                net.state_dict().items(), b.nets[net_name].state_dict().values(), strict=True
            ):
                assert torch.equal(x, y), (net_name, key)
