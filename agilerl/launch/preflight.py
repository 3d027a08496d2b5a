"""Checks a run needs before it writes or imports anything: trust, device, wrappers.

``train.py`` (dry runs included), ``agilerl validate`` and
:class:`~agilerl.trainer.LocalTrainer` run them, so a manifest that would
fail at run time fails at validation time instead.
"""

from __future__ import annotations

from agilerl.arena.models.errors import ConfigError
from agilerl.arena.models.manifest import TrainingManifest
from agilerl.arena.models.trust import CodeField, require_trust

DEVICE_HINT = "use device=cpu, cuda, cuda:N or mps"


def check_device(device: str) -> None:
    """Refuse a device torch does not know or this machine does not have.

    ``cpu`` (the default) is accepted without importing torch, so a dry run
    or ``agilerl validate`` stays fast; other devices need torch to check.

    Raises:
        ConfigError: Naming the device and what is available.
    """
    if str(device).strip() == "cpu":
        return
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"device={device!r} is not a torch device; {DEVICE_HINT}") from None
    if parsed.type == "cpu":
        return
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device={device!r}: no CUDA GPU is visible on this machine "
                "(torch.cuda.is_available() is false); use device=cpu"
            )
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(
                f"device={device!r}: this machine has {count} CUDA device(s), "
                f"cuda:0..cuda:{count - 1}"
            )
        return
    if parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"device={device!r}: MPS is not available here; use device=cpu")
        return
    raise ConfigError(f"device={device!r}: {parsed.type} devices are not supported; {DEVICE_HINT}")


def preflight(
    manifest: TrainingManifest,
    *,
    device: str = "cpu",
    trust_code: bool = False,
    source: str | None = None,
    check_devices: bool = True,
    paradigm_checks: bool = True,
) -> list[CodeField]:
    """Everything checkable before a run starts, beyond the manifest's own validation.

    Args:
        manifest: The validated manifest.
        device: The run's torch device.
        trust_code: The run's opt-in to code named by the manifest.
        source: The file or command named in errors.
        check_devices: Check the device and the files the run reads exist on this
            machine (off when submitting to a scheduler: a login node may have no GPU;
            the job checks on its node).
        paradigm_checks: Run the paradigm's own checks (:func:`check_paradigm`);
            :class:`~agilerl.trainer.LocalTrainer` runs them when it trains instead,
            so that building one needs no files yet.

    Returns:
        The fields that run code (allowed by ``trust_code``).

    Raises:
        ConfigError: For a ``training`` field the paradigm would not read, code without
            the opt-in, an unavailable device, bad wrappers, or settings the algorithm's
            paradigm could not train (its strategy's ``check``).
    """
    from agilerl.strategies import refuse_unused_training_fields

    refuse_unused_training_fields(manifest)  # needs no files: every caller, always
    fields = require_trust(manifest.environment, trust_code, source)
    if check_devices:
        check_device(device)
    if getattr(manifest.environment, "env_wrappers", None):
        from agilerl.envs.gym import check_wrappers

        check_wrappers(manifest.environment)
    if paradigm_checks:
        check_paradigm(manifest, local=check_devices)
    return fields


def check_paradigm(manifest: TrainingManifest, *, local: bool = True) -> None:
    """The checks of the algorithm's paradigm (its strategy's ``check``).

    Skipped when the paradigm's extra is missing: the trainer refuses that run
    naming the extra, the more useful message.

    Raises:
        ConfigError: From the strategy's ``check``.
    """
    from agilerl.extras import installed
    from agilerl.strategies import strategy_for

    strategy = strategy_for(type(manifest.algorithm))
    if all(installed(module) for module in strategy.requires):
        strategy.check(manifest, local=local)
