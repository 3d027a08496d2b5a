"""net_config edits within bounds, weight transfer by overlapping slices, agent rebuilds."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import DQN, PPO, TD3, RainbowDQN
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.arena.models.algorithms.rainbow_dqn import RainbowDQNSpec
from agilerl.arena.models.algorithms.td3 import TD3Spec
from agilerl.hpo.architecture import (
    edit_mlp,
    editable_sections,
    rebuild_agent,
    set_activation,
    transfer_weights,
)
from agilerl.networks.config import resolve_net_config
from agilerl.networks.mlp import MLP

CARTPOLE_OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
PENDULUM_OBS = spaces.Box(-8.0, 8.0, (3,), np.float32)
PENDULUM_ACT = spaces.Box(-2.0, 2.0, (1,), np.float32)
NET = {
    "latent_dim": 16,
    "min_latent_dim": 8,
    "max_latent_dim": 48,
    "encoder_config": {
        "hidden_size": [16],
        "layer_norm": True,
        "min_hidden_layers": 1,
        "max_hidden_layers": 3,
        "min_mlp_nodes": 8,
        "max_mlp_nodes": 64,
    },
    "head_config": {
        "hidden_size": [16, 16],
        "layer_norm": False,
        "min_hidden_layers": 1,
        "max_hidden_layers": 2,
        "min_mlp_nodes": 8,
        "max_mlp_nodes": 40,
    },
}


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cfg(**overrides: object) -> dict:
    return resolve_net_config({**NET, **overrides}, CARTPOLE_OBS)


def _check_bounds(cfg: dict) -> None:
    assert cfg["min_latent_dim"] <= cfg["latent_dim"] <= cfg["max_latent_dim"]
    for key in ("encoder_config", "head_config"):
        sec = cfg[key]
        assert sec["min_hidden_layers"] <= len(sec["hidden_size"]) <= sec["max_hidden_layers"]
        assert all(sec["min_mlp_nodes"] <= h <= sec["max_mlp_nodes"] for h in sec["hidden_size"])


# --- net_config edits ------------------------------------------------------------------
def test_add_and_remove_layer_within_bounds() -> None:
    rng = np.random.default_rng(0)
    cfg = _cfg()
    added, detail = edit_mlp(cfg, "encoder", "add_layer", rng)
    assert added["encoder_config"]["hidden_size"] == [16, 16]
    assert detail == "encoder add_layer [16]->[16, 16]"
    assert cfg["encoder_config"]["hidden_size"] == [16]  # input untouched
    assert edit_mlp(cfg, "encoder", "remove_layer", rng) is None  # at min_hidden_layers
    assert edit_mlp(cfg, "head", "add_layer", rng) is None  # at max_hidden_layers
    removed, detail = edit_mlp(cfg, "head", "remove_layer", rng)
    assert removed["head_config"]["hidden_size"] == [16]
    assert detail == "head remove_layer [16, 16]->[16]"


def test_added_layer_width_is_clipped_into_node_bounds() -> None:
    cfg = _cfg()
    cfg["encoder_config"]["hidden_size"] = [100]  # out of bounds to begin with
    added, _ = edit_mlp(cfg, "encoder", "add_layer", np.random.default_rng(0))
    assert added["encoder_config"]["hidden_size"] == [100, 64]


def test_node_edits_stay_within_bounds_and_change_something() -> None:
    rng = np.random.default_rng(1)
    for section in ("encoder", "head"):
        for op in ("add_nodes", "remove_nodes"):
            cfg = _cfg()
            for _ in range(40):
                result = edit_mlp(cfg, section, op, rng)
                if result is None:
                    break
                new, detail = result
                assert new != cfg and detail.startswith(f"{section} {op}")
                _check_bounds(new)
                cfg = new
            # pushed to the bound in that direction: nothing left to change
            assert result is None
            sec = cfg[f"{section}_config"]
            if op == "add_nodes":
                assert all(h == sec["max_mlp_nodes"] for h in sec["hidden_size"])
                if section == "encoder":
                    assert cfg["latent_dim"] == cfg["max_latent_dim"]
            else:
                assert all(h == sec["min_mlp_nodes"] for h in sec["hidden_size"])


def test_no_legal_edit_when_bounds_are_tight() -> None:
    cfg = _cfg()
    for key in ("encoder_config", "head_config"):
        cfg[key].update(min_hidden_layers=1, max_hidden_layers=1, min_mlp_nodes=16)
        cfg[key].update(max_mlp_nodes=16, hidden_size=[16])
    cfg.update(min_latent_dim=16, max_latent_dim=16)
    rng = np.random.default_rng(2)
    for section in ("encoder", "head"):
        for op in ("add_layer", "remove_layer", "add_nodes", "remove_nodes"):
            assert edit_mlp(cfg, section, op, rng) is None


def test_invalid_section_or_op() -> None:
    with pytest.raises(ValueError, match="section"):
        edit_mlp(_cfg(), "body", "add_layer", np.random.default_rng(0))
    with pytest.raises(ValueError, match="edit"):
        edit_mlp(_cfg(), "head", "grow", np.random.default_rng(0))


def test_only_head_is_editable_for_image_encoders() -> None:
    image = spaces.Box(0, 255, (3, 16, 16), np.uint8)
    cfg = resolve_net_config(None, image)
    assert editable_sections(cfg) == ["head"]
    assert edit_mlp(cfg, "encoder", "add_layer", np.random.default_rng(0)) is None
    assert editable_sections(_cfg()) == ["encoder", "head"]


def test_set_activation() -> None:
    cfg = _cfg()
    new, detail = set_activation(cfg, "GELU")
    assert new["encoder_config"]["activation"] == "GELU"
    assert new["head_config"]["activation"] == "GELU"
    assert detail == "activation ReLU->GELU"
    assert set_activation(new, "GELU") is None


# --- weight transfer --------------------------------------------------------------------
def _overlap_equal(old: torch.Tensor, new: torch.Tensor) -> bool:
    region = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, new.shape, strict=True))
    return torch.equal(old[region], new[region])


def test_transfer_copies_overlapping_slices() -> None:
    old = MLP(4, 3, [8, 6], layer_norm=True)
    wide = MLP(4, 3, [12, 4], layer_norm=True)
    assert transfer_weights(old, wide) == len(wide.state_dict())
    for key, value in old.state_dict().items():
        assert _overlap_equal(value, wide.state_dict()[key])


def test_transfer_keeps_output_layer_when_depth_changes() -> None:
    old = MLP(4, 3, [8], layer_norm=True)
    deeper = MLP(4, 3, [8, 8], layer_norm=True)
    fresh = {k: v.clone() for k, v in deeper.state_dict().items()}
    transfer_weights(old, deeper)
    new = deeper.state_dict()
    assert torch.equal(new["linears.0.weight"], old.linears[0].weight)
    assert torch.equal(new["linears.2.weight"], old.linears[1].weight)  # output -> output
    assert torch.equal(new["linears.1.weight"], fresh["linears.1.weight"])  # new layer fresh
    assert torch.equal(new["norms.0.weight"], old.norms[0].weight)
    assert torch.equal(new["norms.1.weight"], fresh["norms.1.weight"])
    shallower = MLP(4, 3, [8], layer_norm=True)
    transfer_weights(deeper, shallower)
    assert torch.equal(shallower.linears[1].weight, deeper.linears[2].weight)
    assert torch.equal(shallower.linears[0].weight, deeper.linears[0].weight)


# --- agent rebuilds -----------------------------------------------------------------------
def _ppo(obs: spaces.Space = CARTPOLE_OBS, act: spaces.Space | None = None) -> PPO:
    return PPO(
        PPOSpec(), obs, act or spaces.Discrete(2), net_config=NET, learn_step=32, batch_size=16
    )


def _agents() -> list:
    return [
        _ppo(),
        _ppo(PENDULUM_OBS, PENDULUM_ACT),
        DQN(DQNSpec(), CARTPOLE_OBS, spaces.Discrete(2), net_config=NET),
        TD3(TD3Spec(), PENDULUM_OBS, PENDULUM_ACT, net_config=NET),
        RainbowDQN(
            RainbowDQNSpec(), CARTPOLE_OBS, spaces.Discrete(2), net_config=NET, num_atoms=11
        ),
    ]


@pytest.mark.parametrize("agent_id", range(5))
def test_rebuild_with_wider_and_deeper_networks_keeps_weights_and_state(agent_id: int) -> None:
    agent = _agents()[agent_id]
    agent.steps, agent.num_updates, agent.fitness, agent.scores = 123, 7, [1.0, 2.0], [3.0]
    agent.mut, agent.index = "lr", 5
    cfg = dict(agent.net_config)
    cfg["latent_dim"] = 24
    cfg["encoder_config"] = {**cfg["encoder_config"], "hidden_size": [32, 16]}
    cfg["head_config"] = {**cfg["head_config"], "hidden_size": [24, 16]}
    new = rebuild_agent(agent, cfg, seed=0)
    assert type(new) is type(agent) and new is not agent
    assert (new.index, new.steps, new.num_updates, new.mut) == (5, 123, 7, "lr")
    assert new.fitness == [1.0, 2.0] and new.scores == [3.0] and new.fitness is not agent.fitness
    for name in agent.hp_names:
        assert getattr(new, name) == getattr(agent, name)
    assert new.net_config["encoder_config"]["hidden_size"] == [32, 16]
    for net_name in agent.network_names:
        old_state = getattr(agent, net_name).state_dict()
        new_state = getattr(new, net_name).state_dict()
        first = next(k for k in old_state if "linears.0.weight" in k or "layers.0.weight" in k)
        assert _overlap_equal(old_state[first], new_state[first])
        for key in old_state:
            if "encoder" not in key and key in new_state:  # head stacks: same depth
                assert _overlap_equal(old_state[key], new_state[key]), key
    if hasattr(agent, "rng"):
        assert new.rng is agent.rng
    obs = np.zeros((2, *agent.observation_space.shape), np.float32)
    new.get_action(obs)


def test_activation_rebuild_preserves_weights_exactly() -> None:
    agent = _ppo(PENDULUM_OBS, PENDULUM_ACT)
    cfg, _ = set_activation(agent.net_config, "ELU")
    new = rebuild_agent(agent, cfg, seed=1)
    for name in agent.network_names:
        old_state = getattr(agent, name).state_dict()
        new_state = getattr(new, name).state_dict()
        assert old_state.keys() == new_state.keys()
        assert all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    assert new.actor.head.activation == "ELU"


def test_rebuild_seed_makes_fresh_weights_reproducible_without_touching_global_rng() -> None:
    agent = DQN(DQNSpec(), CARTPOLE_OBS, spaces.Discrete(2), net_config=NET)
    cfg, _ = edit_mlp(agent.net_config, "encoder", "add_layer", np.random.default_rng(0))
    state = torch.random.get_rng_state()
    a = rebuild_agent(agent, cfg, seed=3)
    b = rebuild_agent(agent, cfg, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    for key, value in a.actor.state_dict().items():
        assert torch.equal(value, b.actor.state_dict()[key])


def test_node_steps_prefer_deltas_inside_bounds() -> None:
    cfg = _cfg()
    cfg["head_config"]["hidden_size"] = [64]
    cfg["head_config"]["max_mlp_nodes"] = 64
    rng = np.random.default_rng(4)
    results = set()
    for _ in range(30):
        new, _ = edit_mlp(cfg, "head", "remove_nodes", rng)
        results.add(new["head_config"]["hidden_size"][0])
    assert results == {48, 32}  # 64 - 64 would leave the bounds
    cfg["head_config"]["hidden_size"] = [12]
    new, detail = edit_mlp(cfg, "head", "remove_nodes", rng)
    assert new["head_config"]["hidden_size"] == [8] and detail.endswith("[12]->[8]")
    cfg["head_config"]["hidden_size"] = [100]  # above the bound: cannot grow
    assert edit_mlp(cfg, "head", "add_nodes", rng) is None
