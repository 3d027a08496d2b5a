"""The multi-agent loops resume exactly from a checkpoint (agents, RNGs, operators, buffer).

A run stopped by a signal at a generation boundary and resumed from its
checkpoint writes the same metrics, lineage and final weights as the run that
was never stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.arena.models.training import TrainingSpec
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.training.population_loop import PopulationLoop
from agilerl.training.train_multi_agent import (
    train_multi_agent_off_policy,
    train_multi_agent_on_policy,
)
from tests.algorithms_ma.ma_helpers import run_context, stop_at_call, table
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


def _train(name: str, path: Path, *, resume: bool = False) -> Any:
    cls, spec = CASES[name]
    continuous = cls is MATD3
    env = make_vector_env("mpe2.simple_speaker_listener_v4", {"continuous_actions": continuous}, 2)
    eval_env = make_vector_env(
        "mpe2.simple_speaker_listener_v4", {"continuous_actions": continuous}, 2
    )
    torch.manual_seed(0)
    agents = [cls(spec, env.observation_spaces, env.action_spaces, index=i) for i in range(2)]
    # rates only: a mutated learn_step would change how many whole rollouts fit a generation
    rates = {"min": 1e-5, "max": 1e-1}
    names = ("lr", "lr_actor", "lr_critic")
    selection = {name: rates for name in names if name in type(spec).model_fields}
    evolution = make_evolution(spec, 2, 1, selection=selection, rl_hp_mut=1.0)
    run = run_context(path, 7, resume=resume, agents=agents)
    if resume:
        evolution.tournament.load_state_dict(run.resume_state.operators["tournament"])
        evolution.mutation.load_state_dict(run.resume_state.operators["mutation"])
    run.operators_provider = lambda: {
        "tournament": evolution.tournament.state_dict(),
        "mutation": evolution.mutation.state_dict(),
    }
    train = train_multi_agent_on_policy if cls is IPPO else train_multi_agent_off_policy
    delay = None if cls is IPPO else 20
    extra = {} if cls is IPPO else {"save_memory": True}
    result = train(
        agents, env, training=TrainingSpec(max_steps=150, evo_steps=50, learning_delay=delay),
        eval_env=eval_env, run=run, tournament=evolution.tournament,
        mutation=evolution.mutation, **extra,
    )  # fmt: skip
    env.close()
    eval_env.close()
    return result


@pytest.mark.parametrize(("name", "calls"), [("matd3_ou_noise", 60), ("ippo", 3)])
def test_a_stopped_loop_resumes_as_the_uninterrupted_loop(
    name: str, calls: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _train(name, tmp_path / "whole")
    with monkeypatch.context() as patch:
        patch.setattr(PopulationLoop, "interrupted", stop_at_call(calls))
        stopped = _train(name, tmp_path / "parts")
    assert stopped.status == "interrupted" and 0 < stopped.total_steps < whole.total_steps
    resumed = _train(name, tmp_path / "parts", resume=True)
    assert resumed.status == whole.status == "completed"
    assert resumed.total_steps == whole.total_steps == 300

    def rows(run: str, name: str) -> list[dict[str, str]]:
        out = table(tmp_path / run, name)
        for row in out:
            row.pop("wall_seconds", None)
        return out

    assert rows("parts", "metrics.csv") == rows("whole", "metrics.csv")
    assert rows("parts", "hpo.csv") == rows("whole", "hpo.csv")
    for a, b in zip(whole.population, resumed.population, strict=True):
        assert a.index == b.index and a.steps == b.steps and a.scores == b.scores
        assert a.spec == b.spec
        for net_name, net in a.nets.items():
            for (key, x), y in zip(
                net.state_dict().items(), b.nets[net_name].state_dict().values(), strict=True
            ):
                assert torch.equal(x, y), (net_name, key)
