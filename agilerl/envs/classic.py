"""Two-player PettingZoo classic games as single-agent gymnasium envs against an opponent.

``agilerl/ConnectFour-v3`` and ``agilerl/TicTacToe-v3`` put the learner in one
seat of the PettingZoo AEC game and play the other seat with an opponent that
is part of the env:

* ``opponent: random``: a uniformly random legal move (the env's seeded RNG).
* ``opponent: <run directory or agent_<i>.pt>``: a frozen trained agent (the
  best member of a run's latest checkpoint), acting greedily, e.g. the result
  of a run against the random opponent.

The learner observes what PettingZoo gives its seat, ``{"observation",
"action_mask"}`` (every masked algorithm reads the mask, see
:mod:`agilerl.networks.masking`), with the board planes flattened into one
vector (they are not images: an MLP reads them), and receives its seat's
reward (connect four and tic-tac-toe: +1 win, -1 loss, 0 draw). ``learner_seat`` is
``random`` (drawn at every reset), ``first`` or ``second``; as second player
the opponent's opening move is made inside ``reset``. A move the mask forbids
raises ``ValueError``: a masked algorithm never makes one.

    python train.py algorithm=dqn env=connect_four
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agilerl.arena.models.errors import ConfigError, did_you_mean
from agilerl.envs.classic_ids import GAMES
from agilerl.extras import install_hint

__all__ = ["GAMES", "VersusOpponentEnv"]

SEATS = ("random", "first", "second")
_FIELD = "environment.env_config"


class _RandomOpponent:
    """A uniformly random legal move."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def __call__(self, obs: dict[str, np.ndarray]) -> int:
        return int(self.rng.choice(np.flatnonzero(obs["action_mask"])))


class _FrozenOpponent:
    """A trained agent acting greedily on one observation."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def __call__(self, obs: dict[str, np.ndarray]) -> int:
        batch = {key: np.asarray(value)[None] for key, value in obs.items()}
        return int(np.asarray(self.agent.act(batch, greedy=True)).reshape(-1)[0])


def _load_opponent(path: str) -> _FrozenOpponent:
    from agilerl.evaluate import load_algorithm, resolve_agent_file

    try:
        agent = load_algorithm(resolve_agent_file(Path(path).expanduser(), None))
    except ConfigError as exc:
        reason = "; ".join(str(problem) for problem in exc.problems)
        raise ConfigError(
            f"{_FIELD}.opponent: {reason}; or name 'random' for the random opponent"
        ) from None
    if not callable(getattr(agent, "act", None)) or hasattr(agent, "agents"):
        raise ConfigError(
            f"{_FIELD}.opponent: {path} holds a {type(agent).__name__}, which cannot play "
            "one seat; pass a single-agent run trained on this game"
        )
    return _FrozenOpponent(agent)


class VersusOpponentEnv(gym.Env):
    """One seat of a two-player PettingZoo classic (AEC) game; the opponent plays the other.

    Args:
        game: The PettingZoo module (``pettingzoo.classic.connect_four_v3``).
        opponent: ``random``, or a run directory / agent file of a frozen opponent.
        learner_seat: ``random``, ``first`` or ``second``.
        render_mode: Passed to the game.
        **unknown: Refused (named in the error).

    Raises:
        ConfigError: Naming the ``environment.env_config`` key at fault.
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 2}

    def __init__(
        self,
        game: str,
        opponent: str = "random",
        learner_seat: str = "random",
        render_mode: str | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            name = sorted(unknown)[0]
            guess = did_you_mean(name, ["opponent", "learner_seat", "render_mode"])
            hint = f" (did you mean {guess}?)" if guess else ""
            raise ConfigError(
                f"{_FIELD}.{name}: unknown setting{hint}; this game takes opponent, "
                "learner_seat and render_mode"
            )
        if learner_seat not in SEATS:
            raise ConfigError(
                f"{_FIELD}.learner_seat: {learner_seat!r} is not one of {', '.join(SEATS)}"
            )
        if not isinstance(opponent, str) or not opponent:
            raise ConfigError(f"{_FIELD}.opponent: name 'random' or a run directory / agent file")
        try:
            module = importlib.import_module(game)
        except ImportError as exc:
            raise ConfigError(
                f"environment.name: {game} cannot be imported ({exc}); {install_hint('multiagent')}"
            ) from None
        self._game = module.raw_env(render_mode=render_mode)
        self._seats = list(self._game.possible_agents)
        if len(self._seats) != 2:
            raise ConfigError(f"environment.name: {game} is not a two-player game")
        self.render_mode = render_mode
        seat_space = self._game.observation_space(self._seats[0])
        board = seat_space["observation"]
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(
                    board.low.reshape(-1), board.high.reshape(-1), dtype=board.dtype
                ),
                "action_mask": seat_space["action_mask"],
            }
        )
        self.action_space = self._game.action_space(self._seats[0])
        self.learner_seat = learner_seat
        self.opponent_name = opponent
        self._opponent = None if opponent == "random" else _load_opponent(opponent)
        self._me = self._seats[0]

    def _observe(self, seat: str) -> dict[str, np.ndarray]:
        obs = self._game.observe(seat)
        return {"observation": obs["observation"].reshape(-1), "action_mask": obs["action_mask"]}

    def _done(self) -> tuple[bool, bool]:
        game, me = self._game, self._me
        return bool(game.terminations[me]), bool(game.truncations[me])

    def _opponent_moves(self) -> float:
        """The opponent plays until it is the learner's turn or the game is over; the
        learner's reward meanwhile."""
        game, reward = self._game, 0.0
        play = self._opponent or _RandomOpponent(self.np_random)
        while game.agent_selection != self._me and not any(self._done()):
            game.step(play(self._observe(game.agent_selection)))
            reward += float(game.rewards[self._me])
        return reward

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """A new game; the learner's seat as ``learner_seat`` says (``info["seat"]``)."""
        super().reset(seed=seed)
        self._game.reset(seed=int(self.np_random.integers(2**31 - 1)))
        seat = self.learner_seat
        if seat == "random":
            seat = SEATS[1 + int(self.np_random.integers(2))]
        self._me = self._seats[0 if seat == "first" else 1]
        self._opponent_moves()
        return self._observe(self._me), {"seat": seat}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """The learner's move, then the opponent's replies.

        Raises:
            ValueError: If the learner's move is illegal (the mask forbids it).
        """
        action = int(np.asarray(action).reshape(-1)[0])
        legal = self._observe(self._me)["action_mask"]
        if not 0 <= action < legal.shape[0] or not legal[action]:
            raise ValueError(
                f"illegal move {action}: the action mask allows {np.flatnonzero(legal).tolist()}"
            )
        self._game.step(action)
        reward = float(self._game.rewards[self._me])
        reward += self._opponent_moves()
        terminated, truncated = self._done()
        return self._observe(self._me), reward, terminated, truncated, {}

    def render(self) -> Any:
        """The game's rendering."""
        return self._game.render()

    def close(self) -> None:
        """Close the game."""
        self._game.close()
