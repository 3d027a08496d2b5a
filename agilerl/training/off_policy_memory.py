"""How an off-policy loop feeds and samples its memories (plain, n-step, PER, PER + n-step)."""

from __future__ import annotations

from typing import Any

from agilerl.components.replay_buffer import MultiStepReplayBuffer, PrioritizedReplayBuffer


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

    def learn(self, agent: Any, batch_size: int, beta: float | None) -> dict[str, float]:
        """Sample a batch, let ``agent`` learn, update priorities."""
        if self.prioritized:
            batch = self.main.sample(batch_size, beta=beta if beta is not None else 0.4)
            n_batch = self.n_step.sample_from_indices(batch["idxs"]) if self.n_step else None
            stats = agent.learn(batch, n_step_batch=n_batch, weights=batch["weights"])
            self.main.update_priorities(batch["idxs"], stats.pop("priorities"))
        elif isinstance(self.main, MultiStepReplayBuffer):
            stats = agent.learn(self.main.sample(batch_size))
        else:
            stats = agent.learn(self.main.sample(batch_size))
        stats.pop("priorities", None)
        return {k: float(v) for k, v in stats.items()}

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
