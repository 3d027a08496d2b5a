"""The gymnasium ids of the PettingZoo classic games played against an opponent.

Registered on import with a string entry point, so making the ids known imports
neither PettingZoo nor :mod:`agilerl.envs.classic` (loaded when an env is made).
"""

from __future__ import annotations

import gymnasium as gym

__all__ = ["GAMES", "register"]

GAMES: dict[str, str] = {
    "agilerl/ConnectFour-v3": "pettingzoo.classic.connect_four_v3",
    "agilerl/TicTacToe-v3": "pettingzoo.classic.tictactoe_v3",
}
"""Registered gymnasium id -> the PettingZoo classic module it plays."""


def register() -> None:
    """Register the ids of :data:`GAMES` with gymnasium (idempotent)."""
    for env_id, module in GAMES.items():
        if env_id not in gym.registry:
            gym.register(
                env_id,
                entry_point="agilerl.envs.classic:VersusOpponentEnv",
                kwargs={"game": module},
            )


register()
