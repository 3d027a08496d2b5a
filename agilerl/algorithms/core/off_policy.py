"""Shared machinery of the off-policy algorithms (DQN, Rainbow DQN, DDPG, TD3).

:class:`OffPolicyAlgorithm` adds to :class:`SingleAgentAlgorithm`:

* ``get_action(obs, ...)`` returns the env actions as a plain ``np.ndarray``
  (not a tuple as PPO's does); :meth:`OffPolicyAlgorithm.test` adapts that to
  the base evaluation loop, which takes element ``[0]`` of the result.
* Batch preparation for :meth:`learn`: observations through the space's
  converter, flattened rewards/dones, and the per-sample discount
  ``gamma ** n_steps * (1 - done)``.
* Soft (Polyak) target updates over parameter lists in one fused op.
* The NaN guard (``FloatingPointError`` naming the loss and the update).
* A numpy generator for exploration, seeded from torch's RNG so that
  ``torch.manual_seed`` makes acting reproducible.
* :class:`MLPChain`: a plain MLP network (an :class:`EvolvableMLP` encoder on a
  1-D Box plus MLP heads, no LayerNorm, ReLU/Tanh/identity activations) seen
  as a list of ``(weight, bias, activation)`` layers. For such networks the
  algorithms skip autograd: the forward pass saves each layer's input and
  the backward pass is written out by hand (a few matmuls per layer written
  straight into :class:`FlatAdam`'s gradient buffer), which for the tiny
  networks of classic-control tasks costs far less than autograd's graph
  bookkeeping. Acting with such a network runs in numpy on zero-copy views
  of the weights. Other networks (CNN, multi-input, LayerNorm, other
  activations, shared encoders) use autograd; both paths give the same
  updates up to float rounding.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

from agilerl.algorithms.core.base import EvolvableAlgorithm, SingleAgentAlgorithm
from agilerl.networks.mlp import MLP, EvolvableMLP
from agilerl.networks.q_networks import NoisyMLP
from agilerl.networks.spaces import composite_items

__all__ = [
    "Batch",
    "ChainLayer",
    "MLPChain",
    "OffPolicyAlgorithm",
    "batch_size_of",
    "hard_update",
    "soft_update",
]

_CHAIN_ACTIVATIONS = (None, "ReLU", "Tanh")
_threshold_backward = torch.ops.aten.threshold_backward
_tanh_backward = torch.ops.aten.tanh_backward


class Batch(NamedTuple):
    """A prepared transition batch.

    Attributes:
        obs: Observations (tensor or dict of tensors).
        action: Actions as stored, ``[B, ...]``.
        reward: ``[B]`` float rewards.
        next_obs: Next observations.
        discount: ``[B]`` ``gamma ** n_steps * (1 - done)``.
    """

    obs: Any
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: Any
    discount: torch.Tensor


def batch_size_of(obs: Any, observation_space: spaces.Space) -> int:
    """Number of observations in ``obs`` (1 for an unbatched observation).

    Args:
        obs: Array/tensor, or a dict/tuple of them for composite spaces.
        observation_space: The single-env observation space.
    """
    space = observation_space
    if isinstance(space, spaces.Dict | spaces.Tuple):
        key, space = composite_items(space)[0]
        obs = obs[key] if isinstance(obs, Mapping) else obs[int(key)]
    shape = tuple(obs.shape) if hasattr(obs, "shape") else np.shape(obs)
    return int(shape[0]) if len(shape) > len(space.shape or ()) else 1


def _params(modules: Iterable[nn.Module]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


@torch.no_grad()
def soft_update(
    targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor], tau: float
) -> None:
    """``target <- (1 - tau) * target + tau * source`` for paired tensor lists (in place)."""
    if tau >= 1.0:
        torch._foreach_copy_(list(targets), list(sources))
    elif tau > 0.0:
        torch._foreach_lerp_(list(targets), list(sources), float(tau))


def hard_update(target: nn.Module, source: nn.Module) -> None:
    """Copy ``source``'s parameters and buffers into ``target`` (in place)."""
    target.load_state_dict(source.state_dict())


Noise = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""``(weight_sigma, weight_epsilon, bias_sigma, bias_epsilon)`` of a noisy layer."""


class ChainLayer(NamedTuple):
    """One ``Linear -> activation`` layer of an :class:`MLPChain`.

    Attributes:
        weight: ``[out, in]`` weight (the mean weight of a noisy layer).
        bias: ``[out]`` bias (mean bias of a noisy layer).
        act: ``None``, ``"ReLU"`` or ``"Tanh"``.
        noise: ``(weight_sigma, weight_epsilon, bias_sigma, bias_epsilon)`` of a
            :class:`~agilerl.networks.q_networks.NoisyLinear`, else ``None``.
    """

    weight: torch.Tensor
    bias: torch.Tensor
    act: str | None
    noise: Noise | None = None


class MLPChain:
    """A stack of ``Linear -> activation`` layers with a hand-written backward pass.

    Build one with :meth:`from_mlps` or :meth:`from_noisy` (``None`` when a
    network does not qualify). All methods must run without autograd
    recording (callers use ``torch.no_grad()``). Noisy layers use
    ``W = W_mu + W_sigma * eps`` (and likewise the bias) when called with
    ``noise=True``.

    Args:
        layers: The layers, first to last.
    """

    def __init__(self, layers: Sequence[ChainLayer]) -> None:
        self.layers = [ChainLayer(*layer) for layer in layers]
        self.in_features = int(self.layers[0].weight.shape[1])
        self.out_features = int(self.layers[-1].weight.shape[0])
        self._numpy: list[tuple[np.ndarray, ...]] | None = None
        self._numpy_ptrs: tuple[int, ...] = ()

    @classmethod
    def from_mlps(cls, *mlps: MLP | None) -> MLPChain | None:
        """Chain the layers of ``mlps`` (in order), or ``None`` if any does not qualify."""
        layers: list[ChainLayer] = []
        for mlp in mlps:
            if not isinstance(mlp, MLP) or mlp.norms is not None:
                return None
            names = [mlp.activation] * len(mlp.hidden_size) + [mlp.output_activation]
            for linear, name in zip(mlp.linears, names, strict=True):
                act = None if name in (None, "Identity") else name
                if act not in _CHAIN_ACTIVATIONS:
                    return None
                layers.append(ChainLayer(linear.weight, linear.bias, act))
        return cls(layers) if layers else None

    @classmethod
    def from_noisy(cls, mlp: NoisyMLP) -> MLPChain | None:
        """Chain a :class:`NoisyMLP` (no LayerNorm, chainable activation), else ``None``."""
        act = None if mlp.activation in (None, "Identity") else mlp.activation
        if mlp.norms is not None or act not in _CHAIN_ACTIVATIONS:
            return None
        last = len(mlp.layers) - 1
        layers = []
        for i, layer in enumerate(mlp.layers):
            noise = (layer.weight_sigma, layer.weight_epsilon, layer.bias_sigma, layer.bias_epsilon)
            layers.append(
                ChainLayer(layer.weight_mu, layer.bias_mu, act if i < last else None, noise)
            )
        return cls(layers)

    @staticmethod
    def encoder_mlp(encoder: nn.Module) -> MLP | None:
        """The MLP of an :class:`EvolvableMLP` encoder reading a 1-D float Box, else ``None``."""
        if isinstance(encoder, EvolvableMLP) and encoder._flatten is None:
            return encoder.mlp
        return None

    def forward(
        self, x: torch.Tensor, saved: list[tuple] | None = None, noise: bool = True
    ) -> torch.Tensor:
        """Apply the chain; with ``saved`` each layer's input and weights are appended to it."""
        for w, b, act, nz in self.layers:
            noisy = nz is not None and noise
            if noisy:
                w = torch.addcmul(w, nz[0], nz[1])
                b = torch.addcmul(b, nz[2], nz[3])
            if saved is not None:
                saved.append((x, w, noisy))
            x = F.linear(x, w, b)
            if act == "ReLU":
                x = x.relu_()
            elif act == "Tanh":
                x = x.tanh_()
        return x

    def backward(
        self,
        grad: torch.Tensor,
        saved: Sequence[tuple],
        output: torch.Tensor,
        param_grads: bool = True,
        input_grad: bool = False,
    ) -> torch.Tensor | None:
        """Back-propagate ``grad`` (d loss / d output) through the chain.

        Args:
            grad: Gradient with respect to the chain's output.
            saved: What :meth:`forward` saved.
            output: The chain's output from that forward pass.
            param_grads: Write the parameter gradients into each parameter's
                ``.grad`` tensor (overwriting it; noisy layers also get their
                ``sigma`` gradients, zero when the forward pass ran noise-free).
            input_grad: Return the gradient with respect to the chain's input.

        Returns:
            The input gradient when ``input_grad``, else ``None``.
        """
        last = len(self.layers) - 1
        for i in range(last, -1, -1):
            w, b, act, nz = self.layers[i]
            x, w_used, noisy = saved[i]
            h = output if i == last else saved[i + 1][0]
            if act == "ReLU":
                grad = _threshold_backward(grad, h, 0.0)
            elif act == "Tanh":
                grad = _tanh_backward(grad, h)
            if param_grads:
                torch.mm(grad.t(), x, out=w.grad)
                torch.sum(grad, 0, out=b.grad)
                if nz is not None:
                    if noisy:
                        torch.mul(w.grad, nz[1], out=nz[0].grad)
                        torch.mul(b.grad, nz[3], out=nz[2].grad)
                    else:
                        nz[0].grad.zero_()
                        nz[2].grad.zero_()
            if i > 0 or input_grad:
                grad = grad.mm(w_used)
        return grad if input_grad else None

    def forward_numpy(self, x: np.ndarray, noise: bool = False) -> np.ndarray:
        """Apply the chain in numpy (CPU float32 weights, read through zero-copy views).

        A 1-D ``x`` is one observation and gets a leading batch dimension.
        Noisy layers use their current noise sample when ``noise`` is set.
        """
        layers = self._numpy_layers()
        if x.ndim == 1:
            x = x[None]
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        for wt, b, act, nz in layers:
            if nz is not None and noise:
                wt = wt + nz[0] * nz[1]
                b = b + nz[2] * nz[3]
            x = x @ wt
            x += b
            if act == "ReLU":
                np.maximum(x, 0.0, out=x)
            elif act == "Tanh":
                np.tanh(x, out=x)
        return x

    def _numpy_layers(self) -> list[tuple[np.ndarray, ...]]:
        tensors = [
            t for w, b, _, nz in self.layers for t in (w, b, *(nz if nz is not None else ()))
        ]
        ptrs = tuple(t.data_ptr() for t in tensors)
        if self._numpy is None or ptrs != self._numpy_ptrs:

            def view(t: torch.Tensor) -> np.ndarray:
                array = t.detach().numpy()
                return array.T if array.ndim == 2 else array

            self._numpy = [
                (
                    view(w),
                    view(b),
                    act,
                    None if nz is None else tuple(view(t) for t in nz),
                )
                for w, b, act, nz in self.layers
            ]
            self._numpy_ptrs = ptrs
        return self._numpy

    @property
    def numpy_ok(self) -> bool:
        """True when the weights are CPU float32 tensors (numpy acting possible)."""
        w = self.layers[0].weight
        return w.device.type == "cpu" and w.dtype == torch.float32


class _TupleActions:
    """View of an agent whose ``get_action`` returns a 1-tuple, for the base ``test`` loop."""

    def __init__(self, agent: OffPolicyAlgorithm) -> None:
        self._agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def get_action(self, obs: Any, greedy: bool = False) -> tuple[np.ndarray]:
        return (self._agent.get_action(obs, greedy=greedy),)


class OptimizerLR:
    """A learning-rate attribute that keeps its optimizer's rate in step when set.

    Args:
        optimizer: Name of the optimizer attribute (a ``FlatAdam``); until it
            exists (during construction) only the value is stored.
    """

    def __init__(self, optimizer: str) -> None:
        self.optimizer = optimizer
        self.private = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.private = f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self.private)

    def __set__(self, obj: Any, value: float) -> None:
        setattr(obj, self.private, float(value))
        optimizer = getattr(obj, self.optimizer, None)
        if optimizer is not None:
            optimizer.set_lr(float(value))


class OffPolicyAlgorithm(SingleAgentAlgorithm):
    """Base of the replay-buffer algorithms; see the module docstring.

    Attributes:
        uses_epsilon: ``get_action`` honours ``epsilon`` (DQN); the training
            loop only logs epsilon for such agents.
    """

    uses_epsilon: ClassVar[bool] = False

    # --- construction helpers ---------------------------------------------------
    def _warn_unknown(self, kwargs: Mapping[str, Any]) -> None:
        if kwargs:
            warnings.warn(
                f"{type(self).__name__} ignores unknown settings: {sorted(kwargs)}", stacklevel=3
            )

    def _init_rng(self) -> None:
        """Numpy generator for exploration, seeded from torch's global RNG."""
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=None).item())
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def _check_positive(algo: str, **values: float) -> None:
        for name, value in values.items():
            if value < 1:
                raise ValueError(f"{algo} {name} must be >= 1, got {value}")

    @staticmethod
    def _freeze(module: nn.Module) -> nn.Module:
        """Mark a target network's parameters as not requiring gradients."""
        for p in module.parameters():
            p.requires_grad_(False)
        return module

    @staticmethod
    def _param_list(*modules: nn.Module) -> list[torch.Tensor]:
        """Unique parameters of ``modules`` in registration order."""
        return _params(modules)

    # --- learning helpers -------------------------------------------------------
    def _prepare(self, batch: Mapping[str, Any], default_n: int = 1) -> Batch:
        """Convert a sampled batch and compute the discount of each transition.

        Args:
            batch: ``obs, action, reward, next_obs, done`` (and optionally
                ``n_steps``), leading batch dimension.
            default_n: Steps assumed when ``n_steps`` is absent.
        """
        convert = self._to_tensor
        reward = torch.as_tensor(batch["reward"], device=self.device).reshape(-1).float()
        done = torch.as_tensor(batch["done"], device=self.device).reshape(-1).float()
        n_steps = batch.get("n_steps")
        if n_steps is None:
            gamma = self.gamma**default_n
            discount = (1.0 - done).mul_(gamma)
        else:
            n = torch.as_tensor(n_steps, device=self.device).reshape(-1).float()
            discount = torch.pow(self.gamma, n).mul_(1.0 - done)
        action = torch.as_tensor(batch["action"], device=self.device)
        return Batch(convert(batch["obs"]), action, reward, convert(batch["next_obs"]), discount)

    def _check_finite(self, values: Mapping[str, float]) -> None:
        """Raise ``FloatingPointError`` if any loss is not finite (before any step is taken)."""
        for name, value in values.items():
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"{type(self).__name__} {name} became non-finite ({value}) at gradient "
                    f"update {self.num_updates + 1} (env step {self.steps}); no update was applied"
                )

    # --- evaluation ---------------------------------------------------------------
    def test(
        self,
        env: Any,
        max_steps: int | None = None,
        loop: int = 1,
        greedy: bool = True,
        seed: int | None = None,
    ) -> float:
        """Mean episode return on a gymnasium vector env; appended to ``fitness``.

        Same semantics as :meth:`EvolvableAlgorithm.test`; ``get_action`` here
        returns a bare array, which this adapts for the base loop.
        """
        return EvolvableAlgorithm.test(
            _TupleActions(self),  # type: ignore[arg-type]
            env,
            max_steps=max_steps,
            loop=loop,
            greedy=greedy,
            seed=seed,
        )
