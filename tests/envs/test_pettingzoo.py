"""PettingZoo env construction, the shipped wrapper and the multi-agent vector env."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.test import parallel_api_test
from pettingzoo.utils.env import ParallelEnv

from agilerl.arena.models.errors import ConfigError
from agilerl.envs.pettingzoo import (
    ClipActionsParallel,
    ParallelEnvFactory,
    PettingZooVectorEnv,
    make_parallel_env,
    make_vector_env,
)

SL = "mpe2.simple_speaker_listener_v4"
SPREAD = "mpe2.simple_spread_v3"


class StaggeredEnv(ParallelEnv):
    """Two heterogeneous agents that finish at different times.

    ``runner_0`` (obs 3, Discrete(2)) terminates after 3 steps; ``walker_0``
    (obs 5, Box(2) in [0, 1]) is truncated after 5. Reward: the step count
    for the runner, the sum of the action for the walker.
    """

    metadata = {"name": "staggered_v0", "is_parallelizable": True, "render_modes": []}

    def __init__(self) -> None:
        self.possible_agents = ["runner_0", "walker_0"]
        self._obs = {
            "runner_0": spaces.Box(-10, 10, (3,), np.float32),
            "walker_0": spaces.Box(-10, 10, (5,), np.float32),
        }
        self._act = {
            "runner_0": spaces.Discrete(2),
            "walker_0": spaces.Box(0.0, 1.0, (2,), np.float32),
        }
        self.render_mode = None

    @functools.cache  # noqa: B019 - spaces are fixed per agent
    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs[agent]

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Space:
        return self._act[agent]

    def _observe(self, agent: str) -> np.ndarray:
        size = self._obs[agent].shape[0]
        return np.full(size, self.t + self.offset, dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.offset = float(seed % 7)
        elif not hasattr(self, "offset"):
            self.offset = 0.0
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, ...]:
        self.t += 1
        rewards = {}
        for agent in self.agents:
            if agent == "runner_0":
                rewards[agent] = float(self.t)
            else:
                rewards[agent] = float(np.sum(actions[agent]))
        terms = {a: a == "runner_0" and self.t >= 3 for a in self.agents}
        truncs = {a: a == "walker_0" and self.t >= 5 for a in self.agents}
        obs = {a: self._observe(a) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos


def staggered_module_env(**_: object) -> StaggeredEnv:
    return StaggeredEnv()


@pytest.mark.parametrize(
    ("name", "config"),
    [
        (SL, {"continuous_actions": False}),
        (SL, {"continuous_actions": True}),
        (SPREAD, {"N": 3, "continuous_actions": True}),
        ("mpe2.simple_reference_v3", {"continuous_actions": False}),
    ],
)
def test_shipped_envs_and_wrapper_pass_parallel_api_test(name: str, config: dict) -> None:
    parallel_api_test(make_parallel_env(name, config), num_cycles=30)
    parallel_api_test(ClipActionsParallel(make_parallel_env(name, config)), num_cycles=30)


def test_wrapper_passes_api_test_when_agents_finish_at_different_times() -> None:
    parallel_api_test(StaggeredEnv(), num_cycles=20)
    parallel_api_test(ClipActionsParallel(StaggeredEnv()), num_cycles=20)


def test_clip_actions_keeps_continuous_actions_in_bounds() -> None:
    """The wrapper clips out-of-range actions to the bounds: an action of 5 does exactly
    what the upper bound does in the raw env, and -5 what the lower bound does."""
    wrapped = ClipActionsParallel(make_parallel_env(SL, {"continuous_actions": True}))
    raw = make_parallel_env(SL, {"continuous_actions": True})
    wrapped.reset(seed=0)
    raw.reset(seed=0)
    for _ in range(3):
        big = {a: np.full(wrapped.action_space(a).shape, 5.0, np.float32) for a in wrapped.agents}
        high = {a: raw.action_space(a).high.astype(np.float32) for a in raw.agents}
        got, expected = wrapped.step(big), raw.step(high)
        for agent in raw.agents:
            np.testing.assert_array_equal(got[0][agent], expected[0][agent])
            assert got[1][agent] == expected[1][agent]
    small = {a: np.full(wrapped.action_space(a).shape, -5.0, np.float32) for a in wrapped.agents}
    low = {a: raw.action_space(a).low.astype(np.float32) for a in raw.agents}
    got, expected = wrapped.step(small), raw.step(low)
    for agent in raw.agents:
        np.testing.assert_array_equal(got[0][agent], expected[0][agent])


def test_bad_names_raise_config_errors_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"mpe2\.simple_spread_v3"):
        make_parallel_env("pettingzoo.mpe.simple_spread_v3")
    with pytest.raises(ConfigError, match=r"environment\.name"):
        make_parallel_env("mpe2.no_such_env_v9")
    with pytest.raises(ConfigError, match=r"environment\.env_config"):
        make_parallel_env(SL, {"not_an_argument": 1})


def _random_returns(env: PettingZooVectorEnv, episodes_per_copy: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    running = np.zeros(env.num_envs)
    counts = np.zeros(env.num_envs, dtype=int)
    returns: list[list[float]] = [[] for _ in range(env.num_envs)]
    while (counts < episodes_per_copy).any():
        actions = {a: _sample(env.action_spaces[a], env.num_envs, rng) for a in env.agents}
        _, rewards, _, _, info = env.step(actions)
        running += sum(rewards.values())
        for i in np.flatnonzero(info["episode_done"]):
            if counts[i] < episodes_per_copy:
                returns[i].append(float(running[i]))
            counts[i] += 1
            running[i] = 0.0
    return [r for copy in returns for r in copy]


def _sample(space: spaces.Space, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, size=n)
    return rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(np.float32)


def test_vector_env_reproduces_single_env_episodes_exactly() -> None:
    config = {"continuous_actions": False}
    venv = make_vector_env(SL, config, num_envs=3)
    rng = np.random.default_rng(1)
    obs, _ = venv.reset(seed=10)
    singles = [ClipActionsParallel(make_parallel_env(SL, config)) for _ in range(3)]
    single_obs = [s.reset(seed=10 + i)[0] for i, s in enumerate(singles)]
    for step in range(60):  # 2.4 episodes: crosses an autoreset
        actions = {a: _sample(venv.action_spaces[a], 3, rng) for a in venv.agents}
        for i in range(3):
            for agent in venv.agents:
                np.testing.assert_allclose(obs[agent][i], single_obs[i][agent])
        obs, rewards, _, truncated, info = venv.step(actions)
        for i, single in enumerate(singles):
            s_obs, s_rew, _, s_trunc, _ = single.step({a: actions[a][i] for a in single.agents})
            for agent in venv.agents:
                assert rewards[agent][i] == pytest.approx(s_rew[agent])
                assert truncated[agent][i] == s_trunc[agent]
            if not single.agents:
                assert info["episode_done"][i]
                np.testing.assert_allclose(info["final_obs"][i]["listener_0"], s_obs["listener_0"])
                s_obs, _ = single.reset()
            single_obs[i] = s_obs
        assert info["episode_done"].all() == (step % 25 == 24)
    venv.close()


@pytest.mark.parametrize(
    ("name", "config", "expected"),
    [
        (SL, {"continuous_actions": False}, -86.4),
        (SPREAD, {"N": 3, "continuous_actions": False}, -82.9),
    ],
)
def test_vector_env_random_policy_return_matches_reference(name, config, expected) -> None:
    # Reference: 200-episode random-policy means (wave2 facts); std 67.5 / 24.1 per episode.
    env = make_vector_env(name, config, num_envs=8)
    returns = _random_returns(env, episodes_per_copy=8, seed=0)
    env.close()
    assert len(returns) == 64
    tolerance = 3 * (67.5 if name == SL else 24.1) / np.sqrt(len(returns))
    assert abs(np.mean(returns) - expected) < tolerance


def test_subprocess_vector_env_matches_in_process() -> None:
    config = {"continuous_actions": True}
    results = []
    for sync in (True, False):
        env = make_vector_env(SL, config, num_envs=2, sync=sync)
        results.append(_random_returns(env, episodes_per_copy=2, seed=3))
        assert env.sync is sync
        env.close()
    assert results[0] == results[1]


def test_vector_env_handles_agents_finishing_at_different_times(monkeypatch) -> None:
    import sys
    import types

    module = types.ModuleType("staggered_test_env")
    module.parallel_env = staggered_module_env
    monkeypatch.setitem(sys.modules, "staggered_test_env", module)
    env = PettingZooVectorEnv([ParallelEnvFactory("staggered_test_env")] * 2)
    assert env.observation_spaces["runner_0"].shape == (3,)
    assert env.observation_spaces["walker_0"].shape == (5,)
    obs, _ = env.reset(seed=0)
    assert obs["runner_0"].shape == (2, 3) and obs["walker_0"].shape == (2, 5)
    actions = {"runner_0": np.array([1, 0]), "walker_0": np.full((2, 2), 3.0, np.float32)}
    rows = [env.step(actions) for _ in range(6)]
    # Step 3: the runner terminates; it is inactive (zero obs, zero reward) on steps 4-5.
    _, _, term3, _, info3 = rows[2]
    assert term3["runner_0"].all() and info3["active"]["runner_0"].all()
    obs4, rew4, term4, _, info4 = rows[3]
    assert not info4["active"]["runner_0"].any() and info4["active"]["walker_0"].all()
    assert (
        (rew4["runner_0"] == 0).all() and (obs4["runner_0"] == 0).all() and term4["runner_0"].all()
    )
    # Walker actions are clipped to [0, 1] by the wrapper: reward 2.0, not 6.0.
    assert (rew4["walker_0"] == 2.0).all()
    # Step 5: the walker is truncated, the episode ends and both copies autoreset.
    obs5, _, _, trunc5, info5 = rows[4]
    assert trunc5["walker_0"].all() and info5["episode_done"].all()
    assert (obs5["runner_0"] == obs5["runner_0"][:, :1]).all() and obs5["walker_0"][0, 0] == 0.0
    assert info5["final_obs"][0]["walker_0"][0] == 5.0
    _, rew6, _, _, info6 = rows[5]
    assert info6["active"]["runner_0"].all() and (rew6["runner_0"] == 1.0).all()
    env.close()


def test_vector_env_matches_the_wrapped_parallel_env_step_for_step() -> None:
    """The bare-AEC fast path gives exactly what stepping the wrapped parallel env gives."""
    import mpe2.simple_speaker_listener_v4 as sl

    from agilerl.envs.pettingzoo import make_vector_env

    for continuous in (False, True):
        config = {"continuous_actions": continuous, "max_cycles": 5}
        venv = make_vector_env("mpe2.simple_speaker_listener_v4", config, num_envs=2)
        assert all(s.raw is not None for s in venv._steppers)
        plain = [sl.parallel_env(**config) for _ in range(2)]
        obs, _ = venv.reset(seed=3)
        for i, env in enumerate(plain):
            first, _ = env.reset(seed=3 + i)
            for a in venv.agents:
                np.testing.assert_array_equal(obs[a][i], first[a])
        rng = np.random.default_rng(0)
        for _ in range(12):
            actions = {}
            for a in venv.agents:
                space = venv.action_spaces[a]
                if continuous:
                    actions[a] = rng.uniform(-0.2, 1.2, (2, *space.shape)).astype(np.float32)
                else:
                    actions[a] = rng.integers(0, space.n, 2)
            obs, rewards, term, trunc, info = venv.step(actions)
            for i, env in enumerate(plain):
                row = {
                    a: np.clip(actions[a][i], 0.0, 1.0) if continuous else actions[a][i]
                    for a in env.agents
                }
                o, r, te, tr, _ = env.step(row)
                for a in venv.agents:
                    assert rewards[a][i] == np.float32(r[a])
                    assert term[a][i] == te[a] and trunc[a][i] == tr[a]
                if info["episode_done"][i]:
                    for a in venv.agents:
                        np.testing.assert_array_equal(info["final_obs"][i][a], o[a])
                    o, _ = env.reset()
                for a in venv.agents:
                    np.testing.assert_array_equal(obs[a][i], o[a])
        venv.close()
