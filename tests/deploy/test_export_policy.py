"""``agilerl export RUN``: the written ONNX/TorchScript policy acts like ``agilerl.load(RUN)``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

import agilerl
from agilerl.arena.models.errors import ConfigError
from agilerl.cli import main
from tests.deploy.deploy_helpers import RUNS, env_observations

FORMATS = ("onnx", "torchscript")


def run_exported(path: Path, format: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The exported file's actions for ``{input name: batch}``, as a deployment runs it."""
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, inputs)[0]
    with warnings.catch_warnings():  # TorchScript is deprecated in favour of torch.export
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path))
    return module(*(torch.from_numpy(x) for x in inputs.values())).numpy()


def assert_same_actions(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


EXTRA = ("DDPG", "Rainbow DQN")
"""Exported beyond the required five; their ONNX cases (~3 s each) run in the slow suite."""
CASES = [
    pytest.param(
        format, name, marks=[pytest.mark.slow] if format == "onnx" and name in EXTRA else []
    )
    for format in FORMATS
    for name in sorted(RUNS)
]


@pytest.mark.parametrize(("format", "name"), CASES)
def test_the_exported_policy_acts_like_the_loaded_agent(
    format: str,
    name: str,
    trained_run: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = trained_run(name)
    out = tmp_path / f"policy.{format}"
    assert main(["export", str(run), "--format", format, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"exported: {out} ({format}, {RUNS[name][0]['name']} from " in printed
    assert "checked: the same actions as torch on 64 observations" in printed
    agent = agilerl.load(run)
    env = agent.make_env()
    obs = env_observations(env, 100).astype(np.float32)
    env.close()
    expected = agent.act(obs, deterministic=True)
    assert_same_actions(run_exported(out, format, {"obs": obs}), expected)
    # the batch size is free: one observation is a batch of one
    assert_same_actions(run_exported(out, format, {"obs": obs[:1]}), expected[:1])
    if isinstance(agent.action_space, spaces.Box):
        low, high = agent.action_space.low, agent.action_space.high
        assert np.all((expected >= low) & (expected <= high))


def _saved_agent(tmp_path: Path, algorithm: str, observation_space: spaces.Space) -> Path:
    """A freshly built (untrained) agent saved as ``agent_0.pt``."""
    from agilerl.algorithms import DQN, PPO
    from agilerl.arena.models.algorithms.dqn import DQNSpec
    from agilerl.arena.models.algorithms.ppo import PPOSpec

    net: dict[str, Any] = {"latent_dim": 8, "head_config": {"hidden_size": [8]}}
    if isinstance(observation_space, spaces.Dict):
        net["encoder_config"] = {
            "arch": "multiinput",
            "mlp_config": {"hidden_size": [8]},
            "cnn_config": {"channel_size": [8], "kernel_size": [3], "stride_size": [1]},
        }
    else:
        net["encoder_config"] = {
            "arch": "cnn",
            "channel_size": [8],
            "kernel_size": [3],
            "stride_size": [1],
        }
    torch.manual_seed(0)
    if algorithm == "PPO":
        agent = PPO(PPOSpec(net_config=net), observation_space, spaces.Discrete(3, start=1))
    else:
        agent = DQN(DQNSpec(net_config=net), observation_space, spaces.Discrete(4))
    path = tmp_path / "agent_0.pt"
    agent.save_checkpoint(path)
    return path


IMAGE = spaces.Box(0, 255, (3, 8, 8), np.uint8)
SPACES = {
    "uint8 image": ("PPO", IMAGE),
    "dict of image and vector": (
        "DQN",
        spaces.Dict({"image": IMAGE, "state": spaces.Box(-1.0, 1.0, (5,), np.float32)}),
    ),
}


@pytest.mark.parametrize("case", sorted(SPACES))
@pytest.mark.parametrize("format", FORMATS)
def test_image_and_dict_observations_are_preprocessed_inside_the_graph(
    format: str, case: str, tmp_path: Path
) -> None:
    """uint8 frames go in as they are (divided by 255 inside); a Dict space is one input a key."""
    from agilerl.deploy.exporting import export_policy

    algorithm, space = SPACES[case]
    agent_file = _saved_agent(tmp_path, algorithm, space)
    result = export_policy(agent_file, format, tmp_path / f"policy.{format}")
    assert result.checked == 64
    assert result.path.with_name(result.path.name + ".json").is_file()
    space.seed(3)
    samples = [space.sample() for _ in range(20)]
    if isinstance(space, spaces.Dict):
        obs = {k: np.stack([s[k] for s in samples]) for k in space.spaces}
        inputs = {f"obs.{k}": v for k, v in obs.items()}
        assert [i["name"] for i in result.inputs] == ["obs.image", "obs.state"]
    else:
        obs = np.stack(samples)
        inputs = {"obs": obs}
        assert result.inputs == [{"name": "obs", "dtype": "uint8", "shape": ["batch", 3, 8, 8]}]
    expected = agilerl.load(agent_file).act(obs)
    assert_same_actions(run_exported(result.path, format, inputs), expected)


def test_the_default_out_is_inside_the_run(
    trained_run: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run = trained_run("DQN")
    assert main(["export", str(run / "checkpoints"), "--format", "torchscript"]) == 0
    out = capsys.readouterr().out
    assert f"exported: {run}/export/policy.pt" in out
    assert f"description: {run}/export/policy.pt.json" in out
    assert "obs: float32 [batch, 4]" in out and "action: int64 [batch]" in out
    assert (run / "export" / "policy.pt").is_file()
    assert not list((run / "export").glob(".*.tmp"))


def test_missing_onnx_names_the_export_extra(
    trained_run: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import agilerl.extras

    monkeypatch.setattr(agilerl.extras, "installed", lambda module: module != "onnx")
    assert main(["export", str(trained_run("DQN")), "--format", "onnx"]) == 2
    err = capsys.readouterr().err
    assert "needs the export extra (onnx is not installed)" in err
    assert "pip install 'agilerl[export]'" in err and "Traceback" not in err


def test_a_recurrent_policy_is_refused_by_name(tmp_path: Path) -> None:
    from agilerl.algorithms import PPO
    from agilerl.arena.models.algorithms.ppo import PPOSpec
    from agilerl.deploy.policy_graph import policy_graph

    agent = PPO(PPOSpec(recurrent=True), spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    with pytest.raises(ConfigError, match="recurrent PPO policy carries an LSTM state"):
        policy_graph(agent)


@pytest.mark.parametrize("bad", ["missing", "not_a_run", "corrupt"])
def test_a_bad_path_exits_2_naming_it(
    bad: str,
    trained_run: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / bad
    if bad == "not_a_run":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    elif bad == "corrupt":
        source = trained_run("DQN") / "checkpoints"
        latest = (source / "latest").read_text().strip()
        path.write_bytes((source / latest / "agent_0.pt").read_bytes()[:200])
    for command in (["export", str(path), "--format", "torchscript"], ["evaluate", str(path)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"error: {path}" in err or f"checkpoint file {path}" in err
        assert "Traceback" not in err
