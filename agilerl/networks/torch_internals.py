"""Every private torch API the fast paths call, in one place, behind a version check.

The graph-free gradients (:mod:`agilerl.networks.fastgrad`), the stacked
populations (:mod:`agilerl.networks.stacked`), :class:`~agilerl.networks.optim.FlatAdam`
and the target-network updates use a few torch internals: aten backward
kernels, the autograd engine's entry point, the grad-mode switch, the fused
Adam kernel and the ``_foreach`` list ops. Private APIs can change between
releases without notice, so they are used only on the torch versions the
parity tests ran on (:data:`TESTED_TORCH`). On any other version
:data:`FAST_PATHS` is ``False`` and every caller takes its public path: plain
autograd for gradients, sequential populations, the unfused Adam arithmetic,
per-tensor loops for the list ops. Results stay the same within float
tolerance either way (``training.fast_grad: false`` forces the public path on a
known version too; ``tests/networks/test_torch_internals.py`` and
``tests/training/test_fast_grad_field.py`` compare the two).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "FAST_PATHS",
    "FUSED_ADAM",
    "TESTED_TORCH",
    "foreach_copy_",
    "foreach_lerp_",
    "fsdp_lazy_init",
    "fused_adam_",
    "layer_norm",
    "layer_norm_backward",
    "run_backward",
    "set_grad_enabled",
    "supported",
    "tanh_backward",
    "tanh_backward_into",
    "threshold_backward",
    "threshold_backward_into",
    "unsupported_reason",
    "version_of",
]

TESTED_TORCH: tuple[tuple[int, int], tuple[int, int]] = ((2, 3), (2, 13))
"""The oldest and newest ``(major, minor)`` torch the fast paths' parity tests ran on."""


def supported(version: str) -> bool:
    """Whether torch ``version`` (e.g. ``"2.13.0+cpu"``) is one the fast paths know."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return False
    key = (int(match.group(1)), int(match.group(2)))
    return TESTED_TORCH[0] <= key <= TESTED_TORCH[1]


def _lookup() -> dict[str, Any] | None:
    """The private callables, or ``None`` when this torch lacks one of them."""
    try:
        from torch.autograd import Variable

        aten = torch.ops.aten
        return {
            "threshold_backward": aten.threshold_backward,
            "threshold_backward_into": aten.threshold_backward.grad_input,
            "tanh_backward": aten.tanh_backward,
            "tanh_backward_into": aten.tanh_backward.grad_input,
            "layer_norm": aten.native_layer_norm,
            "layer_norm_backward": aten.native_layer_norm_backward,
            "set_grad_enabled": torch._C._set_grad_enabled,
            "engine": Variable._execution_engine,
            "foreach_copy_": torch._foreach_copy_,
            "foreach_lerp_": torch._foreach_lerp_,
            "fused_adam_": getattr(torch, "_fused_adam_", None),
        }
    except (AttributeError, RuntimeError):
        return None


_PRIVATE = _lookup() if supported(torch.__version__) else None

FAST_PATHS: bool = _PRIVATE is not None
"""Whether the private fast paths are in use (a known torch that has all of them)."""

FUSED_ADAM: bool = FAST_PATHS and _PRIVATE["fused_adam_"] is not None
"""Whether :func:`fused_adam_` is torch's one-pass fused Adam kernel."""


def unsupported_reason() -> str | None:
    """Why the fast paths are off on this torch (``None``: they are on)."""
    if FAST_PATHS:
        return None
    low, high = (f"{a}.{b}" for a, b in TESTED_TORCH)
    if not supported(torch.__version__):
        return (
            f"torch {torch.__version__} is outside the versions the fast gradient paths "
            f"are tested on ({low} to {high}); plain autograd is used"
        )
    return f"torch {torch.__version__} lacks a private API the fast paths need; plain autograd"


def _missing(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"torch internal {name} used although {unsupported_reason()}")

    return refuse


def _private(name: str) -> Any:
    """The private callable itself (no wrapper on the hot path), or one that refuses."""
    return _missing(name) if _PRIVATE is None else _PRIVATE[name]


# --- aten kernels (reached only when FAST_PATHS: their callers check it first) ---------------
threshold_backward: Callable[..., torch.Tensor] = _private("threshold_backward")
"""ReLU's backward: ``threshold_backward(grad, output, 0.0)``."""
threshold_backward_into: Callable[..., torch.Tensor] = _private("threshold_backward_into")
"""ReLU's backward written into ``grad_input=``."""
tanh_backward: Callable[..., torch.Tensor] = _private("tanh_backward")
"""Tanh's backward from its output: ``tanh_backward(grad, output)``."""
tanh_backward_into: Callable[..., torch.Tensor] = _private("tanh_backward_into")
"""Tanh's backward written into ``grad_input=``."""
layer_norm: Callable[..., tuple] = _private("layer_norm")
"""LayerNorm's forward saving ``(normalised, mean, rstd)``."""
layer_norm_backward: Callable[..., tuple] = _private("layer_norm_backward")
"""LayerNorm's backward from :func:`layer_norm`'s saved statistics."""

# --- autograd engine -------------------------------------------------------------------------
set_grad_enabled: Callable[[bool], Any] = (
    torch.set_grad_enabled if _PRIVATE is None else _PRIVATE["set_grad_enabled"]
)
"""Switch grad mode without a context manager's overhead (public fallback otherwise)."""


def run_backward(
    tensors: tuple[torch.Tensor, ...], grads: tuple[torch.Tensor, ...], keep_graph: bool = False
) -> None:
    """``torch.autograd.backward`` without its Python argument handling (~40 us per call)."""
    if _PRIVATE is not None:
        _PRIVATE["engine"].run_backward(tensors, grads, keep_graph, False, (), True, True)
    else:
        torch.autograd.backward(tensors, grads, retain_graph=keep_graph)


# --- list ops and the fused optimizer ------------------------------------------------------
def _per_tensor(op: Callable[..., Any]) -> Callable[..., None]:
    def apply(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], *args: Any) -> None:
        for target, source in zip(targets, sources, strict=True):
            op(target, source, *args)

    return apply


def foreach_copy_(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """``target.copy_(source)`` for paired lists, in one dispatch where torch allows."""
    if _PRIVATE is None:
        _per_tensor(torch.Tensor.copy_)(targets, sources)
    else:
        _PRIVATE["foreach_copy_"](list(targets), list(sources))


def foreach_lerp_(
    targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], weight: float
) -> None:
    """``target.lerp_(source, weight)`` for paired lists, in one dispatch where torch allows."""
    if _PRIVATE is None:
        _per_tensor(torch.Tensor.lerp_)(targets, sources, float(weight))
    else:
        _PRIVATE["foreach_lerp_"](list(targets), list(sources), float(weight))


def version_of(tensor: torch.Tensor) -> Any:
    """``tensor``'s in-place version counter (a cache key); on an unknown torch, a fresh
    object that equals nothing, so a cache keyed on it is rebuilt at every use."""
    return tensor._version if _PRIVATE is not None else object()


fused_adam_: Callable[..., None] = (
    _PRIVATE["fused_adam_"] if FUSED_ADAM else _missing("fused_adam_")
)
"""torch's fused Adam kernel (only when :data:`FUSED_ADAM`)."""


def fsdp_lazy_init(module: torch.nn.Module) -> None:
    """Initialise a ``fully_shard`` root now instead of at its first forward.

    FSDP2 fixes each unit's gradient dtypes from the parameters that are
    trainable at that first forward; a LoRA run whose first forward is the
    reference policy's (another adapter active) would fix the wrong ones. There
    is no public call for it in torch 2.13; on a torch whose FSDP state lacks
    it, nothing happens here and the first forward initialises as before.
    """
    get_state = getattr(module, "_get_fsdp_state", None)
    lazy_init = getattr(get_state(), "_lazy_init", None) if get_state is not None else None
    if lazy_init is not None:
        lazy_init()
