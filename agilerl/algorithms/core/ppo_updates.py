"""The bookkeeping of one PPO update, shared by a single agent and a stacked population.

:meth:`PPO.learn <agilerl.algorithms.ppo.PPO.learn>` and
:meth:`PPOGroup.learn <agilerl.algorithms.batched.ppo.PPOGroup.learn>` run the same
schedule: ``update_epochs`` passes over the rollout in minibatches, each
minibatch's loss from :func:`~agilerl.algorithms.core.ppo_objective.ppo_objective`,
diagnostics (KL, clip fraction) where :func:`diagnoses` says, and an early stop
on ``target_kl`` (:func:`~agilerl.algorithms.core.ppo_objective.kl_stops`).
An :class:`UpdateTally` per member counts what happened and reports it as
``learn`` returns it, so both report the same metrics in the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["STAT_NAMES", "UpdateTally", "diagnoses"]

STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
"""The per-minibatch statistics, in the order the loss reports them."""


def diagnoses(target_kl: float | None, epoch: int, epochs: int) -> bool:
    """Whether epoch ``epoch`` computes the KL and clip fraction: every epoch when
    ``target_kl`` may stop the update, else only the last (for the metrics)."""
    return target_kl is not None or epoch == epochs - 1


class UpdateTally:
    """One member's update: statistics summed over its optimizer steps, steps, epochs.

    Args:
        batches_per_epoch: Minibatches in a full pass over the rollout.
    """

    def __init__(self, batches_per_epoch: int) -> None:
        self.batches_per_epoch = max(1, int(batches_per_epoch))
        self.sums = [0.0] * len(STAT_NAMES)
        self.counts = [0] * len(STAT_NAMES)
        self.updates = 0
        self.epochs = 0.0
        self.stopped = False
        self._batches = 0  # optimizer steps in the current epoch

    def step(self, stats: Sequence[float | None]) -> None:
        """An optimizer step was taken on a minibatch with these statistics (``None``: not
        computed for it)."""
        self.updates += 1
        self._batches += 1
        for i, value in enumerate(stats):
            if value is not None:
                self.sums[i] += value
                self.counts[i] += 1

    def stop(self) -> None:
        """``target_kl`` stopped the update: the current epoch counts in part."""
        self.stopped = True
        self.epochs += self._batches / self.batches_per_epoch

    def end_epoch(self) -> None:
        """A full pass ended (a stopped update's epochs are already counted)."""
        if not self.stopped:
            self.epochs += 1.0
        self._batches = 0

    def result(self, lr: float) -> dict[str, float]:
        """``learn``'s metrics: each statistic's mean over the steps that computed it
        (NaN if none did), ``lr``, ``updates`` and ``epochs`` (fractional after a stop)."""
        means = [s / c if c else float("nan") for s, c in zip(self.sums, self.counts, strict=True)]
        return {
            **dict(zip(STAT_NAMES, means, strict=True)),
            "lr": lr,
            "updates": float(self.updates),
            "epochs": self.epochs,
        }
