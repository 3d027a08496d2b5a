"""Batched populations: members with one architecture act and learn as one stacked network.

:func:`make_groups` splits a population into groups: members that stack
(same algorithm, same network layout; see each algorithm's ``*_group_key``)
form one stacked group, and every other member is a :class:`LoneGroup` of
one that acts and learns through its own methods. A group is rebuilt from
the member agents at every evolution boundary (:meth:`sync` writes back
first), so cloning, selection, mutation and checkpoints see ordinary agents.

A group class with ``stacks_alone = False`` leaves a member without a
same-key partner to a :class:`LoneGroup` (its own update is faster than a
stack of one). A group has ``members``, ``slots``, ``act(obs, epsilons, greedy)``,
``learn(rows, batches)`` and ``sync()``; a group with ``takes_replay_extras``
(and :class:`LoneGroup`) also takes each member's n-step batch and PER
weights, ``learn(rows, batches, n_step_batches, weights)``, and returns
``priorities``.

Another algorithm joins by adding its ``(*_group_key, GroupClass)`` pair to
``_KEYS``. Its group must compute its loss with the algorithm's own loss
function, as :class:`DQNGroup` calls :func:`agilerl.algorithms.dqn.dqn_loss`,
:class:`PPOGroup` :func:`agilerl.algorithms.core.ppo_objective.ppo_objective`,
:class:`DDPGGroup` (DDPG and TD3) :func:`agilerl.algorithms.ddpg.ddpg_critic_loss`
and :func:`~agilerl.algorithms.ddpg.ddpg_actor_loss`, :class:`SACGroup`
:func:`agilerl.algorithms.sac.sac_critic_loss` and its actor and temperature
losses, and :class:`RainbowGroup` :func:`agilerl.algorithms.rainbow_dqn.rainbow_loss`;
and it must draw random numbers from each member's own generator, so that
members learn exactly as they would alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agilerl.algorithms.batched.ddpg import DDPGGroup, ddpg_group_key
from agilerl.algorithms.batched.dqn import DQNGroup, dqn_group_key
from agilerl.algorithms.batched.ppo import PPOGroup, ppo_group_key
from agilerl.algorithms.batched.rainbow import RainbowGroup, rainbow_group_key
from agilerl.algorithms.batched.sac import SACGroup, sac_group_key

__all__ = [
    "DDPGGroup",
    "DQNGroup",
    "LoneGroup",
    "PPOGroup",
    "RainbowGroup",
    "SACGroup",
    "batchable",
    "make_groups",
]

_KEYS: list[tuple[Callable[[Any], tuple | None], type]] = [
    (dqn_group_key, DQNGroup),
    (ppo_group_key, PPOGroup),
    (ddpg_group_key, DDPGGroup),
    (sac_group_key, SACGroup),
    (rainbow_group_key, RainbowGroup),
]


class LoneGroup:
    """One member that cannot be stacked, behind the group interface.

    Args:
        member: The agent.
        slot: Its population slot.
    """

    def __init__(self, member: Any, slot: int) -> None:
        self.members = [member]
        self.slots = [slot]

    def __len__(self) -> int:
        return 1

    def act(self, obs: np.ndarray, epsilons: Sequence[float], greedy: bool = False) -> list:
        """The member's env actions for ``obs[0]``."""
        agent = self.members[0]
        if getattr(agent, "uses_epsilon", False):
            return [agent.get_action(obs[0], epsilon=epsilons[0], greedy=greedy)]
        return [agent.act(obs[0], greedy=greedy)]

    takes_replay_extras = True

    def learn(
        self,
        rows: Sequence[int],
        batches: Sequence[Mapping[str, Any]],
        n_step_batches: Sequence[Any] | None = None,
        weights: Sequence[Any] | None = None,
    ) -> list[dict]:
        """The member's own update (with its n-step batch and PER weights, when given)."""
        extras = {}
        if n_step_batches is not None and n_step_batches[0] is not None:
            extras["n_step_batch"] = n_step_batches[0]
        if weights is not None and weights[0] is not None:
            extras["weights"] = weights[0]
        return [self.members[0].learn(batches[0], **extras)]

    def sync(self) -> None:
        """Nothing to write back."""


def _key(agent: Any) -> tuple[tuple, type] | None:
    for key_of, group_class in _KEYS:
        key = key_of(agent)
        if key is not None:
            return key, group_class
    return None


def batchable(agent: Any) -> bool:
    """Whether ``agent`` can join a stacked group."""
    return _key(agent) is not None


def make_groups(population: Sequence[Any]) -> list[Any]:
    """The population's groups, in order of their first member's slot."""
    stacks: dict[tuple, tuple[type, list[int]]] = {}
    order: list[Any] = []
    for slot, agent in enumerate(population):
        found = _key(agent)
        if found is None:
            order.append(slot)
            continue
        key, group_class = found
        if key not in stacks:
            stacks[key] = (group_class, [])
            order.append(key)
        stacks[key][1].append(slot)
    groups = []
    for entry in order:
        if isinstance(entry, int):
            groups.append(LoneGroup(population[entry], entry))
        else:
            group_class, slots = stacks[entry]
            if len(slots) == 1 and not getattr(group_class, "stacks_alone", True):
                groups.append(LoneGroup(population[slots[0]], slots[0]))
                continue
            groups.append(group_class([population[s] for s in slots], slots))
    return groups
