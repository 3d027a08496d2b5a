"""Networks: shapes, distribution maths, config handling, fused inference, FlatAdam."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces
from torch import distributions as td

from agilerl.networks import (
    MLP,
    EvolvableCNN,
    EvolvableMLP,
    EvolvableMultiInput,
    FlatAdam,
    StochasticActor,
    ValueNetwork,
    build_encoder,
    encoder_from_config,
    obs_to_tensor,
    resolve_net_config,
    space_from_dict,
    space_to_dict,
)
from agilerl.networks import distributions as D
from agilerl.networks.fused import build_fused_actor_critic

VEC_OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
IMG_OBS = spaces.Box(0, 255, (3, 16, 16), np.uint8)
DICT_OBS = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (12, 12, 3), np.uint8),
        "vec": spaces.Box(-1.0, 1.0, (5,), np.float32),
        "flag": spaces.Discrete(3),
    }
)
ACTION_SPACES = {
    "discrete": spaces.Discrete(3),
    "multidiscrete": spaces.MultiDiscrete([2, 4, 3]),
    "box": spaces.Box(-2.0, 2.0, (2,), np.float32),
    "multibinary": spaces.MultiBinary(3),
}
SMALL_CNN = {
    "encoder_config": {
        "channel_size": [4],
        "kernel_size": [3],
        "stride_size": [2],
        "min_channel_size": 4,  # resolve_net_config validates against the bounds
    }
}


def _batch(space: spaces.Space, n: int, seed: int = 0) -> object:
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, spaces.Dict):
        return {k: np.stack([s[k] for s in samples]) for k in space.spaces}
    return np.stack(samples)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# --- shapes -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(ACTION_SPACES))
@pytest.mark.parametrize("obs_name", ["vec", "img", "dict", "discrete"])
def test_actor_and_critic_shapes(kind: str, obs_name: str) -> None:
    obs_space = {
        "vec": VEC_OBS,
        "img": IMG_OBS,
        "dict": DICT_OBS,
        "discrete": spaces.Discrete(5),
    }[obs_name]
    net_config = SMALL_CNN if obs_name == "img" else None
    action_space = ACTION_SPACES[kind]
    actor = StochasticActor(obs_space, action_space, net_config=net_config)
    critic = ValueNetwork(obs_space, net_config=net_config)
    obs = obs_to_tensor(obs_space, _batch(obs_space, 6))
    action, log_prob, entropy = actor(obs)
    assert log_prob.shape == (6,) and entropy.shape == (6,)
    expected = {
        "discrete": (6,),
        "multidiscrete": (6, 3),
        "box": (6, 2),
        "multibinary": (6, 3),
    }[kind]
    assert tuple(action.shape) == expected
    env_action = actor.to_env_action(action.numpy())
    assert all(action_space.contains(a) for a in env_action)
    assert critic(obs).shape == (6,)


def test_arch_inference_and_encoders() -> None:
    assert isinstance(build_encoder(VEC_OBS, resolve_net_config(None, VEC_OBS)), EvolvableMLP)
    img_cfg = resolve_net_config(SMALL_CNN, IMG_OBS)
    assert img_cfg["encoder_config"]["arch"] == "cnn"
    assert img_cfg["encoder_config"]["layer_norm"] is False
    assert isinstance(build_encoder(IMG_OBS, img_cfg), EvolvableCNN)
    dict_cfg = resolve_net_config(None, DICT_OBS)
    assert isinstance(build_encoder(DICT_OBS, dict_cfg), EvolvableMultiInput)
    with pytest.raises(ValueError, match="Unknown encoder arch"):
        resolve_net_config({"encoder_config": {"arch": "transformer"}}, VEC_OBS)
    with pytest.raises(ValueError, match=r"head_config\.activation"):
        resolve_net_config({"head_config": {"activation": "Swish"}}, VEC_OBS)


def test_cnn_normalizes_uint8_and_handles_channels_last() -> None:
    hwc = spaces.Box(0, 255, (16, 16, 3), np.uint8)
    cnn = EvolvableCNN(hwc, latent_dim=8, channel_size=[4], kernel_size=[3], stride_size=[2])
    assert cnn.channels_last
    images = torch.randint(0, 256, (2, 16, 16, 3), dtype=torch.uint8)
    raw = EvolvableCNN(
        hwc,
        latent_dim=8,
        channel_size=[4],
        kernel_size=[3],
        stride_size=[2],
        normalize_images=False,
    )
    raw.load_state_dict(cnn.state_dict())
    torch.testing.assert_close(cnn(images), raw(images.float() / 255.0))
    with pytest.raises(ValueError, match="too small"):
        EvolvableCNN(hwc, channel_size=[4, 4], kernel_size=[9, 9], stride_size=[1, 1])


def test_mlp_keeps_architecture_as_data_and_rebuilds() -> None:
    mlp = MLP(4, 2, [32, 16], activation="Tanh", layer_norm=True, min_hidden_layers=1)
    assert mlp.hidden_size == [32, 16]
    assert [layer.out_features for layer in mlp.linears] == [32, 16, 2]
    twin = MLP.from_config(mlp.config)
    twin.load_state_dict(mlp.state_dict())
    x = torch.randn(3, 4)
    torch.testing.assert_close(mlp(x), twin(x))
    enc = EvolvableMLP(VEC_OBS, latent_dim=8, hidden_size=[16])
    rebuilt = encoder_from_config(enc.config)
    assert isinstance(rebuilt, EvolvableMLP) and rebuilt.hidden_size == [16]


def test_prelu_and_softmax_activations_work() -> None:
    mlp = MLP(4, 3, [8], activation="PReLU", output_activation="Softmax")
    out = mlp(torch.randn(5, 4))
    torch.testing.assert_close(out.sum(-1), torch.ones(5))
    assert any("acts.0.weight" in k for k in mlp.state_dict())


def test_shared_encoder_is_one_module() -> None:
    actor = StochasticActor(VEC_OBS, ACTION_SPACES["discrete"])
    critic = ValueNetwork(VEC_OBS, encoder=actor.encoder)
    assert critic.encoder is actor.encoder


def test_random_seed_makes_init_reproducible() -> None:
    cfg = {"random_seed": 7}
    a = StochasticActor(VEC_OBS, ACTION_SPACES["discrete"], net_config=cfg)
    b = StochasticActor(VEC_OBS, ACTION_SPACES["discrete"], net_config=cfg)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


# --- distributions ------------------------------------------------------------------
def test_categorical_matches_torch_distributions() -> None:
    logits = torch.randn(64, 5)
    action, log_prob = D.categorical_sample(logits)
    ref = td.Categorical(logits=logits)
    torch.testing.assert_close(log_prob, ref.log_prob(action))
    lp, ent = D.categorical_evaluate(logits, action)
    torch.testing.assert_close(lp, ref.log_prob(action))
    torch.testing.assert_close(ent, ref.entropy())
    greedy, _ = D.categorical_sample(logits, greedy=True)
    assert torch.equal(greedy, logits.argmax(-1))


def test_categorical_sampling_frequencies() -> None:
    probs = torch.tensor([0.1, 0.2, 0.7])
    logits = probs.log().expand(200_000, 3)
    action, _ = D.categorical_sample(logits)
    freq = torch.bincount(action, minlength=3).float() / action.numel()
    torch.testing.assert_close(freq, probs, atol=5e-3, rtol=0)


def test_multicategorical_matches_product_of_categoricals() -> None:
    nvec = [2, 4, 3]
    dist = D.MultiCategorical(nvec)
    logits = torch.randn(32, sum(nvec))
    action, log_prob = dist.sample(logits)
    parts = torch.split(logits, nvec, dim=1)
    refs = [td.Categorical(logits=p) for p in parts]
    ref_lp = sum(r.log_prob(action[:, i]) for i, r in enumerate(refs))
    ref_ent = sum(r.entropy() for r in refs)
    torch.testing.assert_close(log_prob, ref_lp)
    lp, ent = dist.evaluate(logits, action)
    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
    assert all(int(action[:, i].max()) < n for i, n in enumerate(nvec))
    uniform = D.MultiCategorical([3, 3])
    logits = torch.randn(8, 6)
    a, lp = uniform.sample(logits)
    ref = sum(td.Categorical(logits=p).log_prob(a[:, i]) for i, p in enumerate(logits.split(3, 1)))
    torch.testing.assert_close(lp, ref)


def test_bernoulli_matches_torch_distributions() -> None:
    logits = torch.randn(16, 3)
    action, log_prob = D.bernoulli_sample(logits)
    ref = td.Independent(td.Bernoulli(logits=logits), 1)
    torch.testing.assert_close(log_prob, ref.log_prob(action))
    lp, ent = D.bernoulli_evaluate(logits, action)
    torch.testing.assert_close(lp, ref.log_prob(action))
    torch.testing.assert_close(ent, ref.entropy())


def test_gaussian_matches_torch_distributions() -> None:
    mean = torch.randn(16, 2)
    log_std = torch.tensor([-0.5, 0.3])
    action, log_prob = D.gaussian_sample(mean, log_std)
    ref = td.Independent(td.Normal(mean, log_std.exp()), 1)
    torch.testing.assert_close(log_prob, ref.log_prob(action))
    lp, ent = D.gaussian_evaluate(mean, log_std, action)
    torch.testing.assert_close(lp, ref.log_prob(action))
    torch.testing.assert_close(ent, ref.entropy())
    greedy, glp = D.gaussian_sample(mean, log_std, greedy=True)
    torch.testing.assert_close(greedy, mean)
    torch.testing.assert_close(glp, ref.log_prob(mean))


def test_box_actor_log_std_init_and_action_mapping() -> None:
    box = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 4.0], np.float32))
    actor = StochasticActor(VEC_OBS, box, action_std_init=-0.7)
    torch.testing.assert_close(actor.log_std.detach(), torch.full((2,), -0.7))
    raw = np.array([[5.0, -5.0], [0.0, 1.0]], np.float32)
    np.testing.assert_allclose(actor.to_env_action(raw), [[1.0, 0.0], [0.0, 1.0]])
    squashing = StochasticActor(VEC_OBS, box, net_config={"squash_output": True})
    squashed = squashing.to_env_action(raw)
    np.testing.assert_allclose(squashed[1], [0.0, 2.0 + 2.0 * np.tanh(1.0)], rtol=1e-6)
    assert np.all(squashed[0] >= box.low) and np.all(squashed[0] <= box.high)
    with pytest.raises(ValueError, match="finite"):
        StochasticActor(
            VEC_OBS, spaces.Box(-np.inf, np.inf, (2,)), net_config={"squash_output": True}
        )


def test_discrete_start_offset() -> None:
    actor = StochasticActor(VEC_OBS, spaces.Discrete(3, start=-1))
    assert list(actor.to_env_action(np.array([0, 2]))) == [-1, 1]


def test_unsupported_action_space_named() -> None:
    with pytest.raises(ValueError, match="Tuple"):
        StochasticActor(VEC_OBS, spaces.Tuple([spaces.Discrete(2)]))


# --- fused inference ----------------------------------------------------------------
@pytest.mark.parametrize("shared", [False, True])
def test_fused_actor_critic_matches_modules(shared: bool) -> None:
    cfg = {
        "latent_dim": 16,
        "encoder_config": {"hidden_size": [32], "activation": "Tanh", "layer_norm": False},
        "head_config": {"hidden_size": [24], "activation": "Tanh", "layer_norm": False},
    }
    actor = StochasticActor(VEC_OBS, ACTION_SPACES["multidiscrete"], net_config=cfg)
    critic = ValueNetwork(VEC_OBS, net_config=cfg, encoder=actor.encoder if shared else None)
    fused = build_fused_actor_critic(actor, critic, shared)
    assert fused is not None
    obs = torch.randn(7, 4)
    params, value = fused(obs)
    torch.testing.assert_close(params, actor.head(actor.encoder(obs)))
    torch.testing.assert_close(value, critic(obs))


def test_fusion_skipped_with_layer_norm() -> None:
    norm = {
        "encoder_config": {"hidden_size": [16], "layer_norm": True},
        "head_config": {"hidden_size": [16], "layer_norm": True},
    }
    actor = StochasticActor(VEC_OBS, ACTION_SPACES["discrete"], net_config=norm)
    critic = ValueNetwork(VEC_OBS, net_config=norm)
    assert build_fused_actor_critic(actor, critic, False) is None
    # the default network has no LayerNorm (MlpSpec.layer_norm is False), so it fuses
    default = resolve_net_config(None, VEC_OBS)
    assert default["encoder_config"]["layer_norm"] is False
    assert default["head_config"]["layer_norm"] is False and default["latent_dim"] == 64
    actor = StochasticActor(VEC_OBS, ACTION_SPACES["discrete"])
    assert build_fused_actor_critic(actor, ValueNetwork(VEC_OBS), False) is not None


# --- optimizer ----------------------------------------------------------------------
@pytest.mark.parametrize("fused", [False, True])
def test_flat_adam_matches_torch_adam_with_clipping(fused: bool) -> None:
    def make() -> torch.nn.Module:
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))

    ref, flat = make(), make()
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, eps=1e-5)
    flat_opt = FlatAdam(flat.parameters(), lr=1e-2, eps=1e-5, fused=fused)
    assert flat_opt.fused is fused
    for step in range(5):
        x = torch.randn(16, 4, generator=torch.Generator().manual_seed(step))
        ref_opt.zero_grad()
        ref(x).square().sum().backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
        flat_opt.zero_grad()
        flat(x).square().sum().backward()
        flat_opt.clip_grad_norm_(0.5)
        flat_opt.step()
    for a, b in zip(ref.parameters(), flat.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_flat_adam_relinks_replaced_grads_and_state_round_trip() -> None:
    net = torch.nn.Linear(3, 2)
    opt = FlatAdam(net.parameters(), lr=0.1)
    net.zero_grad(set_to_none=True)  # detaches grads from the flat buffer
    net(torch.ones(1, 3)).sum().backward()
    before = net.weight.detach().clone()
    opt.step()
    assert not torch.equal(before, net.weight)
    assert net.weight.grad.data_ptr() == opt.flat_grad.data_ptr()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    other = FlatAdam(torch.nn.Linear(3, 2).parameters(), lr=0.5)
    other.load_state_dict(state)
    assert other.step_count == 1 and other.lr == pytest.approx(0.1)
    torch.testing.assert_close(other.exp_avg, opt.exp_avg)
    with pytest.raises(ValueError, match="does not match"):
        FlatAdam(torch.nn.Linear(4, 2).parameters()).load_state_dict(state)


def test_fused_flat_adam_resumes_with_the_loaded_step_count() -> None:
    def make(steps: int) -> tuple[torch.nn.Module, FlatAdam]:
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        opt = FlatAdam(net.parameters(), lr=0.1, fused=True)
        for _ in range(steps):
            opt.zero_grad()
            net(torch.ones(4, 3)).square().sum().backward()
            opt.step()
        return net, opt

    net, opt = make(3)
    resumed, resumed_opt = make(0)
    resumed.load_state_dict(net.state_dict())
    resumed_opt.load_state_dict(opt.state_dict())
    for model, optimizer in ((net, opt), (resumed, resumed_opt)):
        optimizer.zero_grad()
        model(torch.ones(4, 3)).square().sum().backward()
        optimizer.step()  # bias corrections of step 4 on both
    assert resumed_opt.step_count == 4
    torch.testing.assert_close(resumed.weight, net.weight, rtol=0, atol=0)


# --- spaces -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "space",
    [
        VEC_OBS,
        IMG_OBS,
        spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, np.inf]), dtype=np.float64),
        spaces.Discrete(4, start=1),
        spaces.MultiDiscrete([2, 3]),
        spaces.MultiBinary([2, 3]),
        DICT_OBS,
        spaces.Tuple([spaces.Discrete(2), VEC_OBS]),
    ],
)
def test_space_round_trip_is_weights_only_safe(space: spaces.Space) -> None:
    buffer = io.BytesIO()
    torch.save(space_to_dict(space), buffer)
    buffer.seek(0)
    restored = space_from_dict(torch.load(buffer, weights_only=True))
    assert restored == space


def test_space_to_dict_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="Text"):
        space_to_dict(spaces.Text(5))
