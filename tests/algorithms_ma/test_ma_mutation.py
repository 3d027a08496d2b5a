"""Architecture mutation of multi-agent group networks: within bounds, weights kept, trainable."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from agilerl.algorithms.core.multi_agent import MultiAgentAlgorithm
from agilerl.algorithms.ippo import IPPO
from agilerl.algorithms.matd3 import MATD3
from agilerl.arena.models.algorithms.ippo import IPPOSpec
from agilerl.arena.models.algorithms.matd3 import MATD3Spec
from agilerl.arena.models.training import TrainingSpec
from agilerl.envs.pettingzoo import make_vector_env
from agilerl.hpo.architecture import edit_mlp
from agilerl.hpo.group_architecture import group_net_configs, mutate_group_architecture
from agilerl.hpo.tournament import TournamentSelection
from agilerl.training.train_multi_agent import train_multi_agent_off_policy
from tests.algorithms_ma.ma_helpers import run_context, table
from tests.hpo.operators import make_evolution

SL = "mpe2.simple_speaker_listener_v4"
NET = {
    "latent_dim": 16,
    "encoder_config": {"arch": "mlp", "hidden_size": [16], "layer_norm": False},
    "head_config": {"hidden_size": [16], "layer_norm": False},
}
ALGOS = [(IPPO, IPPOSpec, False), (MATD3, MATD3Spec, True)]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module if isinstance(m, nn.Linear)]


def _widths(module: nn.Module) -> list[int]:
    return [layer.out_features for layer in _linears(module)[:-1]]


@pytest.mark.parametrize(("cls", "spec_cls", "continuous"), ALGOS)
def test_one_group_is_edited_and_the_rest_kept(cls, spec_cls, continuous) -> None:
    env = make_vector_env(SL, {"continuous_actions": continuous}, num_envs=2)
    agent = cls(spec_cls(net_config=NET), env.observation_spaces, env.action_spaces)
    agent.steps, agent.fitness = 123, [-50.0]
    edits = 0
    for seed in range(6):
        new, detail = mutate_group_architecture(agent, np.random.default_rng(seed), new_layer=0.5)
        assert detail, "no edit fits bounds this wide"
        edits += 1
        group = detail.split(":")[0]
        other = next(g for g in ("speaker", "listener") if g != group)
        assert group_net_configs(new)[other] == group_net_configs(agent)[other]
        assert group_net_configs(new)[group] != group_net_configs(agent)[group]
        policy = f"{group}_0"
        old_actor, new_actor = agent.actors[policy], new.actors[policy]
        assert _widths(new_actor) != _widths(old_actor)
        assert all(8 <= w <= 256 for w in _widths(new_actor)) and len(_widths(new_actor)) <= 12
        # The output layer is the old output layer where shapes overlap; the other group is copied.
        old_out, new_out = _linears(old_actor)[-1].weight, _linears(new_actor)[-1].weight
        rows, cols = (min(a, b) for a, b in zip(old_out.shape, new_out.shape, strict=True))
        assert torch.equal(new_out[:rows, :cols], old_out[:rows, :cols])
        for a, b in zip(
            agent.actors[f"{other}_0"].parameters(),
            new.actors[f"{other}_0"].parameters(),
            strict=True,
        ):
            assert torch.equal(a, b)
        assert new.steps == 123 and new.fitness == [-50.0] and new.index == agent.index
        obs, _ = env.reset(seed=0)
        env.step(new.act(obs))
        restored = MultiAgentAlgorithm.from_state(new.state_dict())
        assert _widths(restored.actors[policy]) == _widths(new_actor)
    assert edits == 6
    env.close()


def test_no_edit_outside_the_bounds() -> None:
    env = make_vector_env(SL, {"continuous_actions": True}, num_envs=2)
    fixed = {"hidden_size": [16], "min_hidden_layers": 1, "max_hidden_layers": 2,
             "min_mlp_nodes": 16, "max_mlp_nodes": 16, "layer_norm": False}  # fmt: skip
    net = {"latent_dim": 16, "min_latent_dim": 16, "max_latent_dim": 16,
           "encoder_config": {"arch": "mlp", **fixed}, "head_config": fixed}  # fmt: skip
    agent = MATD3(MATD3Spec(net_config=net), env.observation_spaces, env.action_spaces)
    for seed in range(5):  # only add_layer fits (one more layer of width 16)
        new, detail = mutate_group_architecture(agent, np.random.default_rng(seed), new_layer=0.0)
        assert "add_layer" in detail, detail
        section = "encoder_config" if "encoder" in detail else "head_config"
        group = detail.split(":")[0]
        assert group_net_configs(new)[group][section]["hidden_size"] == [16, 16]
        grown = group_net_configs(new)[group]
        assert edit_mlp(grown, section.split("_")[0], "add_layer", np.random.default_rng()) is None
    env.close()


def _evolving_run(
    path, max_steps: int, mutate_elite: bool = False, **probabilities: float
) -> tuple[Any, dict[int, Any]]:
    """Two MATD3 members on continuous speaker-listener, evolving every 50 steps."""
    env = make_vector_env(SL, {"continuous_actions": True}, num_envs=2)
    torch.manual_seed(0)
    spec = MATD3Spec(net_config=NET, batch_size=16, learn_step=8)
    agents = [MATD3(spec, env.observation_spaces, env.action_spaces, index=i) for i in range(2)]
    before = {i: group_net_configs(a) for i, a in enumerate(agents)}
    evolution = make_evolution(spec, 2, 0, mutate_elite=mutate_elite, **probabilities)
    result = train_multi_agent_off_policy(
        agents, env, training=TrainingSpec(max_steps=max_steps, evo_steps=50, learning_delay=20),
        eval_env=env,
        tournament=evolution.tournament, mutation=evolution.mutation, run=run_context(path, 2),
    )  # fmt: skip
    env.close()
    return result, before


def test_the_loop_evolves_group_networks_and_keeps_training(tmp_path) -> None:
    result, before = _evolving_run(tmp_path, 150, arch_mut=1.0, new_layer=0.5)
    lineage = table(tmp_path, "hpo.csv")
    # the elite (first of each new population) is kept as it is (mutate_elite is off)
    elites = [r for r in lineage if r["elite"] == "True"]
    assert len(elites) == 2 and all(e["detail"] == "elite kept" for e in elites)
    others = [r for r in lineage if r["elite"] == "False"]
    assert others and all(r["mutation"] == "arch" and r["detail"] for r in others)
    assert any(group_net_configs(a) != before[0] for a in result.population)
    assert all(math.isfinite(float(r["fitness"])) for r in table(tmp_path))
    for agent in result.population:
        assert agent.steps == 150
        assert all(torch.isfinite(p).all() for net in agent.nets.values() for p in net.parameters())


def test_mutate_elite_mutates_the_elite_too(tmp_path) -> None:
    _evolving_run(tmp_path, 100, mutate_elite=True, rl_hp_mut=1.0)
    assert {r["mutation"] for r in table(tmp_path, "hpo.csv")} == {"rl_hp"}


def test_the_loop_honours_rl_hp_selection(tmp_path) -> None:
    """Only the hyperparameters mutation.rl_hp_selection names mutate, within its factors."""
    from agilerl.arena.models.hpo import MutationSpec
    from agilerl.hpo import Mutations

    env = make_vector_env(SL, {"continuous_actions": True}, num_envs=2)
    torch.manual_seed(0)
    spec = MATD3Spec(net_config=NET, batch_size=16, learn_step=8, lr_actor=1e-3)
    agents = [MATD3(spec, env.observation_spaces, env.action_spaces, index=i) for i in range(3)]
    selection = {"lr_actor": {"min": 1e-4, "max": 1e-2, "grow_factor": 2.0, "shrink_factor": 0.5}}
    mutation = MutationSpec(
        probabilities={"no_mut": 0.0, "arch_mut": 0.0, "params_mut": 0.0, "rl_hp_mut": 1.0},
        rl_hp_selection=selection,
    )
    result = train_multi_agent_off_policy(
        agents, env, training=TrainingSpec(max_steps=150, evo_steps=50, learning_delay=20),
        eval_env=env,
        tournament=TournamentSelection(2, True, 3, rng=np.random.default_rng(0)),
        mutation=Mutations.from_spec(mutation, spec, rng_seed=0), run=run_context(tmp_path, 2),
    )  # fmt: skip
    env.close()
    mutated = [r for r in table(tmp_path, "hpo.csv") if r["mutation"] == "rl_hp"]
    assert len(mutated) == 4 and all(r["detail"].startswith("lr_actor ") for r in mutated)
    for agent in result.population:
        assert agent.spec.model_dump(exclude={"lr_actor"}) == spec.model_dump(exclude={"lr_actor"})
        assert agent.spec.lr_actor in (1e-3, 2e-3, 5e-4, 4e-3, 2.5e-4)
