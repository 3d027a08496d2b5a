"""How an off-policy loop feeds and samples its memories (plain, n-step, PER, PER + n-step)."""

from __future__ import annotations

from typing import Any, NamedTuple

from agilerl.components.replay_buffer import PrioritizedReplayBuffer


def annealed_beta(beta0: float | None, steps: int, max_steps: int) -> float | None:
    """PER's importance exponent after ``steps`` of ``max_steps``, annealed linearly to 1."""
    if beta0 is None:
        return None
    return beta0 + (1.0 - beta0) * min(1.0, steps / max_steps)


class Draw(NamedTuple):
    """One sampled batch and what an agent's ``learn`` takes with it.

    Attributes:
        batch: The one-step batch.
        n_step_batch: The n-step transitions at the same indices (PER + n-step), or ``None``.
        weights: PER importance weights, or ``None``.
        idxs: The sampled indices whose priorities the learner's result updates (PER).
    """

    batch: Any
    n_step_batch: Any = None
    weights: Any = None
    idxs: Any = None


class Memory:
    """The replay memory of one agent (or of a population sharing experience).

    Args:
        main: ``init_buffer``'s buffer.
        n_step: ``init_n_step_buffer``'s buffer (PER + n-step), or ``None``.
    """

    def __init__(self, main: Any, n_step: Any = None) -> None:
        self.main = main
        self.n_step = n_step
        self.prioritized = isinstance(main, PrioritizedReplayBuffer)

    def __len__(self) -> int:
        return len(self.main)

    def add(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, done: Any, truncated: Any
    ) -> None:
        """Store one vector step of transitions."""
        if self.n_step is not None:
            one_step = self.n_step.add(
                obs, action, reward, next_obs, done, truncated=truncated, is_vectorised=True
            )
            if one_step is not None:
                self.main.add(**one_step, is_vectorised=True)
        else:
            self.main.add(
                obs, action, reward, next_obs, done, truncated=truncated, is_vectorised=True
            )

    @property
    def has_extras(self) -> bool:
        """Whether a learner also takes n-step batches or PER weights from this memory."""
        return self.prioritized or self.n_step is not None

    def draw(self, batch_size: int, beta: float | None) -> Draw:
        """Sample a batch (with its n-step twin and PER weights where this memory has them)."""
        if not self.prioritized:
            return Draw(self.main.sample(batch_size))
        batch = self.main.sample(batch_size, beta=beta if beta is not None else 0.4)
        n_batch = self.n_step.sample_from_indices(batch["idxs"]) if self.n_step else None
        return Draw(batch, n_batch, batch["weights"], batch["idxs"])

    def settle(self, draw: Draw, stats: dict[str, Any]) -> dict[str, float]:
        """Update the drawn priorities from a learner's ``stats``; return its plain statistics."""
        priorities = stats.pop("priorities", None)
        if draw.idxs is not None:
            self.main.update_priorities(draw.idxs, priorities)
        return {k: float(v) for k, v in stats.items()}

    def learn(self, agent: Any, batch_size: int, beta: float | None) -> dict[str, float]:
        """Sample a batch, let ``agent`` learn, update priorities."""
        draw = self.draw(batch_size, beta)
        if draw.idxs is None:
            return self.settle(draw, agent.learn(draw.batch))
        stats = agent.learn(draw.batch, n_step_batch=draw.n_step_batch, weights=draw.weights)
        return self.settle(draw, stats)

    def state_dict(self) -> dict[str, Any]:
        """Buffer contents for a checkpoint."""
        state = {"main": self.main.state_dict()}
        if self.n_step is not None:
            state["n_step"] = self.n_step.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.main.load_state_dict(state["main"])
        if self.n_step is not None and "n_step" in state:
            self.n_step.load_state_dict(state["n_step"])
