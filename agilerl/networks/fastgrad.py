"""One fast-gradient path for every algorithm: graph-free MLP trunks behind :class:`GradTape`.

An algorithm writes its loss once, in plain torch, and calls its networks'
sub-modules through a tape::

    tape = GradTape()
    q = net.forward(obs, tape=tape)            # encoder and head go through the tape
    loss = (q.gather(1, a).squeeze(1) - target).square().mean()
    optimizer.zero_grad()
    tape.backward(loss)                        # same gradients as loss.backward()
    optimizer.step()

For a module that qualifies (a plain :class:`~agilerl.networks.mlp.MLP`, an
:class:`~agilerl.networks.mlp.EvolvableMLP` reading a flat Box, or a
:class:`~agilerl.networks.noisy.NoisyMLP`; ReLU/Tanh/identity
activations, with or without LayerNorm) the tape runs the layers without
recording an autograd graph, saving each layer's input, and hands the loss a
fresh leaf tensor. :meth:`GradTape.backward` lets autograd differentiate the
loss down to those leaves, then back-propagates through each trunk with the
aten backward kernels (a few matmuls per layer, written straight into the
parameters' ``.grad``). For the tiny networks of classic-control tasks this
costs far less than autograd's graph bookkeeping (tanh goes through numpy's
kernel on CPU float32, several times faster than torch's at these sizes; the
backward reads only its output). Any other module is simply
called, so its part of the graph is ordinary autograd: the loss code is the
same either way, and ``tests/networks/test_fastgrad.py`` checks the gradients
against plain autograd for every algorithm.

:class:`MLPChain` is also what acting uses for numpy inference on the CPU.

Several same-shaped trunks that read the same input (twin critics) run as one
:class:`ModuleStack` through :meth:`GradTape.stacked`: one batched matmul per
layer for all of them. Their weights are read as ``[N, out, in]`` views when
they lie side by side in memory (see :func:`interleaved_parameters` and
:func:`pack_parameters`), else stacked per call; either way the gradients are
those of calling each trunk on its own.
"""

from __future__ import annotations

import abc
import contextlib
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from agilerl.networks import torch_internals as internals

__all__ = [
    "ChainLayer",
    "GradTape",
    "LayerViews",
    "MLPChain",
    "ModuleStack",
    "StackedChain",
    "TapeFunction",
    "autograd_only",
    "chain_of",
    "fast_gradients",
    "gradient_mode",
    "interleaved_parameters",
    "joined_chain",
    "pack_parameters",
    "run",
    "stacked_chain_of",
]

_CHAIN_ACTIVATIONS = (None, "ReLU", "Tanh")
_threshold_backward = internals.threshold_backward
_threshold_backward_into = internals.threshold_backward_into
_tanh_backward = internals.tanh_backward
_tanh_backward_into = internals.tanh_backward_into
_layer_norm = internals.layer_norm
_layer_norm_backward = internals.layer_norm_backward

Noise = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""``(weight_sigma, weight_epsilon, bias_sigma, bias_epsilon)`` of a noisy layer."""


class ChainLayer(NamedTuple):
    """One ``Linear -> LayerNorm? -> activation`` layer of an :class:`MLPChain`.

    Attributes:
        weight: ``[out, in]`` weight (the mean weight of a noisy layer).
        bias: ``[out]`` bias (mean bias of a noisy layer).
        act: ``None``, ``"ReLU"`` or ``"Tanh"``.
        noise: ``(weight_sigma, weight_epsilon, bias_sigma, bias_epsilon)`` of a
            noisy layer, else ``None``.
        norm: The ``nn.LayerNorm`` applied before the activation, else ``None``.
    """

    weight: torch.Tensor
    bias: torch.Tensor
    act: str | None
    noise: Noise | None = None
    norm: nn.LayerNorm | None = None


def _act_name(name: str | None) -> str | bool | None:
    """The chain's name for an activation, or ``False`` when the chain cannot run it."""
    name = None if name in (None, "Identity") else name
    return name if name in _CHAIN_ACTIVATIONS else False


class MLPChain:
    """A stack of ``Linear -> LayerNorm? -> activation`` layers with a hand-written backward.

    All methods run without autograd recording (:class:`GradTape` calls them
    under ``torch.no_grad()``). Noisy layers use ``W = W_mu + W_sigma * eps``
    (and likewise the bias) when called with ``noise=True``.

    Args:
        layers: The layers, first to last.
    """

    def __init__(self, layers: Sequence[ChainLayer]) -> None:
        self.layers = [ChainLayer(*layer) for layer in layers]
        self._numpy: list[tuple[Any, ...]] | None = None
        self._numpy_ptrs: tuple[int, ...] = ()

    # --- construction -----------------------------------------------------------------
    @classmethod
    def of(cls, module: nn.Module) -> MLPChain | None:
        """The chain view of ``module``, or ``None`` when it does not qualify."""
        from agilerl.networks.mlp import MLP, EvolvableMLP
        from agilerl.networks.noisy import NoisyMLP

        if isinstance(module, EvolvableMLP):
            return cls.of(module.mlp) if module._flatten is None else None
        if isinstance(module, nn.Sequential):
            return cls._of_sequential(module)
        if isinstance(module, MLP):
            names = [module.activation] * len(module.hidden_size) + [module.output_activation]
            layers = []
            for i, (linear, name) in enumerate(zip(module.linears, names, strict=True)):
                act = _act_name(name)
                if act is False:
                    return None
                norm = module.norms[i] if module.norms is not None and i < len(names) - 1 else None
                layers.append(ChainLayer(linear.weight, linear.bias, act, None, norm))
            return cls(layers)
        if isinstance(module, NoisyMLP):
            act = _act_name(module.activation)
            if act is False:
                return None
            last = len(module.layers) - 1
            layers = []
            for i, layer in enumerate(module.layers):
                noise = (
                    layer.weight_sigma,
                    layer.weight_epsilon,
                    layer.bias_sigma,
                    layer.bias_epsilon,
                )
                norm = module.norms[i] if module.norms is not None and i < last else None
                hidden_act = act if i < last else None
                layers.append(ChainLayer(layer.weight_mu, layer.bias_mu, hidden_act, noise, norm))
            return cls(layers)
        return None

    @classmethod
    def _of_sequential(cls, module: nn.Sequential) -> MLPChain | None:
        """``Linear -> LayerNorm? -> activation?`` repeated (multi-agent ``build_mlp``), or None."""
        layers: list[ChainLayer] = []
        linear: nn.Linear | None = None
        norm: nn.LayerNorm | None = None
        act: str | None = None
        for child in [*module, None]:
            if child is None or isinstance(child, nn.Linear):
                if linear is not None:
                    layers.append(ChainLayer(linear.weight, linear.bias, act, None, norm))
                elif child is None:
                    return None
                linear, norm, act = child, None, None
            elif isinstance(child, nn.LayerNorm) and linear is not None and norm is act is None:
                norm = child
            elif linear is not None and act is None and _act_name(type(child).__name__):
                act = _act_name(type(child).__name__)
            else:
                return None
        return cls(layers)

    # --- torch ------------------------------------------------------------------------
    def forward(
        self, x: torch.Tensor, saved: list[tuple] | None = None, noise: bool = True
    ) -> torch.Tensor:
        """Apply the chain; with ``saved``, what :meth:`backward` needs is appended to it."""
        for w, b, act, nz, norm in self.layers:
            noisy = nz is not None and noise
            if noisy:
                w = torch.addcmul(w, nz[0], nz[1])
                b = torch.addcmul(b, nz[2], nz[3])
            pre = F.linear(x, w, b)
            stats = None
            if norm is not None:
                out, mean, rstd = _layer_norm(
                    pre, norm.normalized_shape, norm.weight, norm.bias, norm.eps
                )
                stats = (pre, mean, rstd)
                pre = out
            if act == "ReLU":
                pre = pre.relu_()
            elif act == "Tanh":
                pre = _tanh_(pre)
            if saved is not None:
                saved.append((x, w, noisy, stats))
            x = pre
        return x

    def backward(
        self,
        grad: torch.Tensor,
        saved: Sequence[tuple],
        output: torch.Tensor,
        param_grads: bool = True,
        input_grad: bool = False,
        input_cols: slice | None = None,
    ) -> torch.Tensor | None:
        """Back-propagate ``grad`` (d loss / d output) through the chain.

        Parameter gradients are added to each parameter's ``.grad`` (created
        when missing); noisy layers also get their ``sigma`` gradients.

        Args:
            grad: Gradient with respect to the chain's output.
            saved: What :meth:`forward` saved.
            output: The chain's output from that forward pass.
            param_grads: Accumulate the parameter gradients.
            input_grad: Return the gradient with respect to the chain's input.
            input_cols: Only these input columns' gradient (e.g. the action
                part of a critic's ``[latent, action]`` input); default all.

        Returns:
            The input gradient when ``input_grad``, else ``None``.
        """
        last = len(self.layers) - 1
        for i in range(last, -1, -1):
            w, b, act, nz, norm = self.layers[i]
            x, w_used, noisy, stats = saved[i]
            h = output if i == last else saved[i + 1][0]
            grad = _activation_backward(act, grad, h, owned=i < last)
            if norm is not None:
                pre, mean, rstd = stats
                mask = [True, param_grads, param_grads]
                grad, grad_w, grad_b = _layer_norm_backward(
                    grad, pre, norm.normalized_shape, mean, rstd, norm.weight, norm.bias, mask
                )
                if param_grads:
                    _accumulate(norm.weight, grad_w)
                    _accumulate(norm.bias, grad_b)
            if param_grads:
                if nz is None and w.grad is not None and b.grad is not None:
                    if x.shape[-1] < _NARROW:
                        w.grad.add_(_matmul(grad.t(), x))
                    else:
                        w.grad.addmm_(grad.t(), x)
                    b.grad.add_(grad.sum(0))
                else:
                    grad_weight = _matmul(grad.t(), x)
                    grad_bias = grad.sum(0)
                    _accumulate(w, grad_weight)
                    _accumulate(b, grad_bias)
                    if nz is not None and noisy:
                        _accumulate(nz[0], grad_weight * nz[1])
                        _accumulate(nz[2], grad_bias * nz[3])
            if i > 0:
                grad = grad.mm(w_used)
            elif input_grad:
                w_in = w_used if input_cols is None else w_used[:, input_cols]
                grad = _matmul(grad, w_in)
        return grad if input_grad else None

    # --- numpy ------------------------------------------------------------------------
    def forward_numpy(self, x: np.ndarray, noise: bool = False) -> np.ndarray:
        """Apply the chain in numpy (CPU float32 weights, read through zero-copy views).

        A 1-D ``x`` is one observation and gets a leading batch dimension.
        """
        layers = self._numpy_layers()
        if x.ndim == 1:
            x = x[None]
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        for wt, b, act, nz, norm in layers:
            if nz is not None and noise:
                wt = wt + nz[0] * nz[1]
                b = b + nz[2] * nz[3]
            x = x @ wt
            x += b
            if norm is not None:
                weight, bias, eps = norm
                mean = x.mean(axis=-1, keepdims=True)
                var = x.var(axis=-1, keepdims=True)
                x = (x - mean) / np.sqrt(var + eps) * weight + bias
            if act == "ReLU":
                np.maximum(x, 0.0, out=x)
            elif act == "Tanh":
                np.tanh(x, out=x)
        return x

    def _numpy_layers(self) -> list[tuple[Any, ...]]:
        tensors = []
        for w, b, _, nz, norm in self.layers:
            tensors += [w, b, *(nz or ())]
            if norm is not None:
                tensors += [norm.weight, norm.bias]
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
                    None if norm is None else (view(norm.weight), view(norm.bias), norm.eps),
                )
                for w, b, act, nz, norm in self.layers
            ]
            self._numpy_ptrs = ptrs
        return self._numpy

    @property
    def numpy_ok(self) -> bool:
        """True when the weights are CPU float32 tensors (numpy acting possible)."""
        w = self.layers[0].weight
        return w.device.type == "cpu" and w.dtype == torch.float32


def _tanh_(x: torch.Tensor) -> torch.Tensor:
    """In-place tanh; through numpy for CPU float32 (several times faster than torch here)."""
    if (
        x.dtype == torch.float32
        and x.device.type == "cpu"
        and x.is_contiguous()
        and not x.requires_grad
    ):
        array = x.numpy()
        np.tanh(array, out=array)
        return x
    return x.tanh_()


def _activation_backward(
    act: str | None, grad: torch.Tensor, output: torch.Tensor, owned: bool
) -> torch.Tensor:
    """``grad`` through the activation whose output was ``output``.

    ``owned``: ``grad`` is a temporary of this backward pass (a matmul's result),
    so it is overwritten in place. Fewer fresh buffers keep a learn step's memory
    inside the core's cache, where these memory-bound kernels run several times
    faster.
    """
    if act == "ReLU":
        if owned:
            return _threshold_backward_into(grad, output, 0.0, grad_input=grad)
        return _threshold_backward(grad, output, 0.0)
    if act == "Tanh":
        if owned:
            return _tanh_backward_into(grad, output, grad_input=grad)
        return _tanh_backward(grad, output)
    return grad


_NARROW = 16


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (2-D or batched 3-D), computed as ``(b^T a^T)^T`` when the result is narrow.

    MKL's CPU GEMM takes a slow path for a tall result with fewer than ~16
    columns (a weight gradient of a 3-input layer, the input gradient of a
    1-column action slice): the transposed product is the same sums, several
    times faster.
    """
    mm = torch.mm if a.dim() == 2 else torch.bmm
    if b.shape[-1] < _NARROW <= a.shape[-2]:
        return mm(b.mT, a.mT).mT
    return mm(a, b)


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    if param.grad is None:
        param.grad = grad.clone()
    else:
        param.grad.add_(grad)


_CHAINS: weakref.WeakKeyDictionary[nn.Module, MLPChain | None] = weakref.WeakKeyDictionary()


def chain_of(module: nn.Module) -> MLPChain | None:
    """The (cached) :class:`MLPChain` of ``module``, or ``None`` when it does not qualify
    (or when this torch's internals are unknown: see :mod:`~agilerl.networks.torch_internals`)."""
    if not internals.FAST_PATHS:
        return None
    try:
        return _CHAINS[module]
    except KeyError:
        chain = _CHAINS[module] = MLPChain.of(module)
        return chain


def joined_chain(*modules: nn.Module) -> MLPChain | None:
    """One chain running ``modules`` in sequence (for numpy acting), or ``None``."""
    chains = [chain_of(m) for m in modules]
    if any(c is None for c in chains):
        return None
    return MLPChain([layer for c in chains for layer in c.layers])


def _stacked_view(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """An ``[N, *shape]`` view over same-shaped contiguous tensors lying back to back, or None."""
    first = tensors[0]
    if not first.is_contiguous():
        return None
    step = first.numel() * first.element_size()
    base = first.data_ptr()
    for i, t in enumerate(tensors):
        if t.data_ptr() != base + i * step or t.shape != first.shape or not t.is_contiguous():
            return None
    return first.as_strided((len(tensors), *first.shape), (first.numel(), *first.stride()))


class LayerViews(NamedTuple):
    """One layer of ``N`` stacked chains: ``[N, ...]`` tensors (or numpy arrays).

    Attributes:
        weight: ``[N, out, in]``.
        bias: ``[N, out]``.
        norm_weight: ``[N, out]`` LayerNorm scale, else ``None``.
        norm_bias: ``[N, out]`` LayerNorm shift, else ``None``.
        weight_t: ``weight`` transposed, ``[N, in, out]`` (what a forward pass multiplies by).
        bias_row: ``bias`` as ``[N, 1, out]`` (broadcast over the batch).

    As a gradient target (see :meth:`StackedChain.backward`) only ``weight``,
    ``bias`` and the norm fields are read; a ``None`` there goes to the
    backward's ``fallback``.
    """

    weight: Any
    bias: Any
    norm_weight: Any = None
    norm_bias: Any = None
    weight_t: Any = None
    bias_row: Any = None


class StackedChain:
    """``N`` same-shaped ``Linear -> LayerNorm? -> activation`` chains run as one, with a
    hand-written backward: one batched matmul per layer for all of them.

    The one implementation of stacked chains: twin critics read as one
    (:class:`ModuleStack`, through :meth:`GradTape.stacked`) and a population's
    members stacked in ``[N, P]`` rows (:class:`~agilerl.networks.stacked.LayoutStack`)
    both run through it; they differ only in where the per-layer
    :class:`LayerViews` of weights and gradients come from. Like
    :class:`MLPChain`, no method records an autograd graph (call them with
    gradients disabled).

    Args:
        acts: Each layer's activation (``None``, ``"ReLU"`` or ``"Tanh"``).
        norm_eps: Each layer's LayerNorm epsilon, ``None`` for no LayerNorm.
    """

    def __init__(self, acts: Sequence[str | None], norm_eps: Sequence[float | None]) -> None:
        self.acts = tuple(acts)
        self.norm_eps = tuple(norm_eps)

    def forward(
        self, views: Sequence[LayerViews], x: torch.Tensor, saved: list[tuple] | None = None
    ) -> torch.Tensor:
        """``[B, in]`` (shared) or ``[N, B, in] -> [N, B, out]``: member ``i``'s chain on its input.

        With ``saved``, what :meth:`backward` needs is appended to it.
        """
        if x.dim() == 2:
            x = x.expand(views[0].weight.shape[0], *x.shape)
        for layer, act, eps in zip(views, self.acts, self.norm_eps, strict=True):
            h = torch.baddbmm(layer.bias_row, x, layer.weight_t)
            stats = None
            if eps is not None:
                normed, mean, rstd = _layer_norm(h, (h.shape[-1],), None, None, eps)
                stats = (h, normed, mean, rstd)
                h = torch.addcmul(
                    layer.norm_bias.unsqueeze(1), normed, layer.norm_weight.unsqueeze(1)
                )
            if act == "ReLU":
                h = h.relu_()
            elif act == "Tanh":
                h = _tanh_(h)
            if saved is not None:
                saved.append((x, stats))
            x = h
        return x

    def forward_numpy(self, views: Sequence[LayerViews], x: np.ndarray) -> np.ndarray:
        """:meth:`forward` in numpy, on views of a CPU ``float32`` numpy array (acting)."""
        if x.dtype != np.float32:
            x = x.astype(np.float32)
        for layer, act, eps in zip(views, self.acts, self.norm_eps, strict=True):
            x = np.matmul(x, layer.weight_t)
            x += layer.bias_row
            if eps is not None:
                mean = x.mean(axis=-1, keepdims=True)
                var = x.var(axis=-1, keepdims=True)
                x = (x - mean) / np.sqrt(var + eps)
                x = x * layer.norm_weight[:, None, :] + layer.norm_bias[:, None, :]
            if act == "ReLU":
                np.maximum(x, 0.0, out=x)
            elif act == "Tanh":
                np.tanh(x, out=x)
        return x

    def backward(
        self,
        grad: torch.Tensor,
        views: Sequence[LayerViews],
        saved: Sequence[tuple],
        output: torch.Tensor,
        targets: Sequence[LayerViews | None] | None = None,
        *,
        param_grads: bool = True,
        input_grad: bool = False,
        input_cols: slice | None = None,
        fallback: Any = None,
    ) -> torch.Tensor | None:
        """Back-propagate ``grad`` (d loss / d output, ``[N, B, out]``).

        Args:
            grad: The output's gradient.
            views: The layers' parameters, as in the forward pass.
            saved: What the forward pass saved.
            output: The forward pass's output.
            targets: Per layer, where the parameter gradients are added (views of
                gradient buffers).
            param_grads: Compute parameter gradients.
            input_grad: Return the input's gradient.
            input_cols: Only these input columns' gradient.
            fallback: ``fallback(layer, kind, grad)`` receives a ``[N, ...]``
                weight (``kind`` 0) or bias (1) gradient whose target is ``None``.

        Returns:
            The input's gradient ``[N, B, in]`` when ``input_grad``, else ``None``.
        """
        last = len(self.acts) - 1
        for i in range(last, -1, -1):
            layer = views[i]
            x, stats = saved[i]
            h = output if i == last else saved[i + 1][0]
            grad = _activation_backward(self.acts[i], grad, h, owned=i < last)
            target = targets[i] if targets is not None else None
            if stats is not None:
                pre, normed, mean, rstd = stats
                if param_grads:
                    target.norm_weight.add_((grad * normed).sum(1))
                    target.norm_bias.add_(grad.sum(1))
                grad = grad * layer.norm_weight.unsqueeze(1)
                grad = _layer_norm_backward(
                    grad, pre, (pre.shape[-1],), mean, rstd, None, None, [True, False, False]
                )[0]
            if param_grads:
                _add_layer_grads(i, grad, x, target, fallback)
            if i > 0:
                grad = torch.bmm(grad, layer.weight)
            elif input_grad:
                weight = layer.weight if input_cols is None else layer.weight[:, :, input_cols]
                grad = _matmul(grad, weight)
        return grad if input_grad else None


def _add_layer_grads(
    layer: int, grad: torch.Tensor, x: torch.Tensor, target: LayerViews | None, fallback: Any
) -> None:
    """Add a stacked layer's weight and bias gradients (from output ``grad``, input ``x``)."""
    weight = target.weight if target is not None else None
    bias = target.bias if target is not None else None
    grad_w: torch.Tensor | None = None
    if weight is not None and x.shape[-1] >= _NARROW:
        weight.baddbmm_(grad.mT, x)  # accumulated in place: no temporary
    else:
        grad_w = _matmul(grad.mT, x)
    grad_b = grad.sum(1)
    for kind, view, g in ((0, weight, grad_w), (1, bias, grad_b)):
        if g is None:
            continue
        if view is not None:
            view.add_(g)
        else:
            fallback(layer, kind, g)


class ModuleStack:
    """``N`` same-shaped :class:`MLPChain` s (no noise, no LayerNorm) as one :class:`StackedChain`.

    The input is ``[B, in]`` (shared by all members) or ``[N, B, in]``; the output
    is ``[N, B, out]``. Weights are read as ``[N, out, in]`` views when the
    members' parameters lie back to back in memory (e.g. in a :class:`FlatAdam`
    buffer filled by :func:`interleaved_parameters`), else stacked on each call;
    gradients go into each member's ``.grad`` (through the same kind of view
    when the gradients lie back to back too).

    Args:
        chains: The members' chains.
    """

    def __init__(self, chains: Sequence[MLPChain]) -> None:
        self.chains = list(chains)
        self.size = len(self.chains)
        acts = [layer.act for layer in self.chains[0].layers]
        self.core = StackedChain(acts, [None] * len(acts))
        self._tensors = [
            tuple(c.layers[i].weight for c in self.chains)
            + tuple(c.layers[i].bias for c in self.chains)
            for i in range(len(acts))
        ]
        self._ptrs: tuple[int, ...] = ()
        self._views: list[tuple[torch.Tensor | None, torch.Tensor | None]] = []
        self._layer_views: list[LayerViews] | None = None
        # per layer: (gradient data pointers, the [N, ...] weight and bias gradient views)
        self._grad_views: dict[int, tuple[tuple[int, ...], LayerViews]] = {}

    @classmethod
    def of(cls, modules: Sequence[nn.Module]) -> ModuleStack | None:
        """The stacked view of ``modules``, or ``None`` when they do not qualify."""
        chains = [chain_of(m) for m in modules]
        if len(chains) < 2 or any(c is None for c in chains):
            return None
        first = chains[0].layers
        seen: set[int] = set()
        for chain in chains:
            if len(chain.layers) != len(first):
                return None
            for layer, ref in zip(chain.layers, first, strict=True):
                if layer.noise is not None or layer.norm is not None or layer.act != ref.act:
                    return None
                if layer.weight.shape != ref.weight.shape or id(layer.weight) in seen:
                    return None
                seen.add(id(layer.weight))
        return cls(chains)

    def _stacked_views(self) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
        """Per layer, the ``[N, ...]`` weight and bias views (``None`` where not back to back)."""
        ptrs = tuple(t.data_ptr() for ts in self._tensors for t in ts)
        if ptrs != self._ptrs:
            n = self.size
            self._views = [
                (
                    _stacked_view([t.detach() for t in ts[:n]]),
                    _stacked_view([t.detach() for t in ts[n:]]),
                )
                for ts in self._tensors
            ]
            self._ptrs = ptrs
            self._layer_views = None
        return self._views

    def layers(self) -> list[LayerViews]:
        """Every layer's :class:`LayerViews`: views of the parameters when they lie back to
        back (made once per storage), else stacked copies made on this call."""
        views = self._stacked_views()
        if self._layer_views is not None:
            return self._layer_views
        out = []
        n = self.size
        for ts, (w, b) in zip(self._tensors, views, strict=True):
            w = w if w is not None else torch.stack([t.detach() for t in ts[:n]])
            b = b if b is not None else torch.stack([t.detach() for t in ts[n:]])
            out.append(LayerViews(w, b, None, None, w.transpose(1, 2), b.unsqueeze(1)))
        if all(w is not None and b is not None for w, b in views):
            self._layer_views = out
        return out

    def forward(self, x: torch.Tensor, saved: list[tuple] | None = None) -> torch.Tensor:
        """Apply all members to ``x`` (``[B, in]`` or ``[N, B, in]``); ``[N, B, out]``."""
        views = self.layers()
        if saved is not None:
            saved.append(views)  # the backward pass multiplies by the same weights
        return self.core.forward(views, x, saved)

    def backward(
        self,
        grad: torch.Tensor,
        saved: Sequence[Any],
        output: torch.Tensor,
        param_grads: bool = True,
        input_grad: bool = False,
        input_cols: slice | None = None,
    ) -> torch.Tensor | None:
        """Back-propagate ``grad`` (``[N, B, out]``); see :meth:`MLPChain.backward`.

        Returns:
            The gradient with respect to the (expanded) input, ``[N, B, in]``,
            when ``input_grad``, else ``None``.
        """
        targets = [self._grad_target(i) for i in range(len(self._tensors))] if param_grads else None
        return self.core.backward(
            grad,
            saved[0],
            saved[1:],
            output,
            targets,
            param_grads=param_grads,
            input_grad=input_grad,
            input_cols=input_cols,
            fallback=self._accumulate,
        )

    def _grad_target(self, i: int) -> LayerViews | None:
        """Layer ``i``'s ``[N, ...]`` views of the members' ``.grad`` (when back to back)."""
        params = self._tensors[i]
        grads = [p.grad for p in params]
        if any(g is None for g in grads):
            return None
        ptrs = tuple(g.data_ptr() for g in grads)
        cached = self._grad_views.get(i)
        if cached is None or cached[0] != ptrs:
            n = self.size
            cached = self._grad_views[i] = (
                ptrs,
                LayerViews(_stacked_view(grads[:n]), _stacked_view(grads[n:])),
            )
        return cached[1]

    def _accumulate(self, layer: int, kind: int, grad: torch.Tensor) -> None:
        """Add a ``[N, ...]`` gradient into each member's own ``.grad``."""
        n = self.size
        members = self._tensors[layer][:n] if kind == 0 else self._tensors[layer][n:]
        for p, g in zip(members, grad.unbind(0), strict=True):
            _accumulate(p, g)


_STACKS: weakref.WeakKeyDictionary[
    nn.Module, tuple[tuple[weakref.ref, ...], ModuleStack | None]
] = weakref.WeakKeyDictionary()


def stacked_chain_of(modules: Sequence[nn.Module]) -> ModuleStack | None:
    """The (cached) :class:`ModuleStack` of ``modules``, or ``None`` when they do not qualify."""
    if not internals.FAST_PATHS:
        return None
    cached = _STACKS.get(modules[0])
    if cached is not None:
        refs, stack = cached
        if len(refs) == len(modules) and all(r() is m for r, m in zip(refs, modules, strict=True)):
            return stack
    stack = ModuleStack.of(modules)
    _STACKS[modules[0]] = (tuple(weakref.ref(m) for m in modules), stack)
    return stack


def interleaved_parameters(*modules: nn.Module) -> list[nn.Parameter]:
    """The unique parameters of same-shaped ``modules``, member by member within each slot.

    ``[m1.w1, m2.w1, m1.b1, m2.b1, ...]``: an optimizer or :func:`pack_parameters`
    that lays them out in this order puts each slot's tensors back to back, which
    lets a :class:`ModuleStack` read them as one ``[N, ...]`` view. Modules whose
    parameter shapes differ are returned one after another.
    """
    lists = [list(m.parameters()) for m in modules]
    shapes = [[p.shape for p in ps] for ps in lists]
    if any(s != shapes[0] for s in shapes):
        ordered = [p for ps in lists for p in ps]
    else:
        ordered = [p for slot in zip(*lists, strict=True) for p in slot]
    seen: set[int] = set()
    return [p for p in ordered if not (id(p) in seen or seen.add(id(p)))]


@torch.no_grad()
def pack_parameters(params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """Move ``params``' storage into one flat tensor, in order (their values kept); return it.

    Each parameter's ``.data`` becomes a view of the flat tensor, so modules keep
    working as before (``load_state_dict`` copies in place). Returns ``None``
    (and changes nothing) for mixed dtypes or devices.
    """
    if not params or len({(p.dtype, p.device) for p in params}) != 1:
        return None
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    return flat


_FAST = [internals.FAST_PATHS]


def fast_gradients() -> bool:
    """Whether :class:`GradTape` s made now take the graph-free path by default."""
    return _FAST[-1]


@contextlib.contextmanager
def gradient_mode(fast: bool) -> Iterator[None]:
    """Within this block :class:`GradTape` s take the graph-free path only if ``fast``.

    ``training.fast_grad`` runs a whole run in one mode; the graph-free path is
    also off, whatever ``fast`` says, on a torch version it does not know
    (:data:`agilerl.networks.torch_internals.FAST_PATHS`).
    """
    _FAST.append(bool(fast) and internals.FAST_PATHS)
    try:
        yield
    finally:
        _FAST.pop()


def autograd_only() -> contextlib.AbstractContextManager[None]:
    """Within this block every :class:`GradTape` uses plain autograd (parity tests)."""
    return gradient_mode(False)


class _Record(NamedTuple):
    chain: MLPChain | ModuleStack
    saved: list[tuple]
    inputs: tuple[torch.Tensor, ...]
    output: torch.Tensor
    param_grads: bool


class TapeFunction(abc.ABC):
    """A differentiable step between networks with its backward written out (e.g. a sampler).

    :meth:`forward` is the maths, in plain torch; :meth:`GradTape.apply` runs it
    without an autograd graph and later calls :meth:`backward`, or, for a tape
    in :func:`autograd_only` mode, runs it under autograd (the parity tests
    compare the two).
    """

    @abc.abstractmethod
    def forward(self, *inputs: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], Any]:
        """``(outputs, saved)``: the outputs and whatever :meth:`backward` needs."""

    @abc.abstractmethod
    def backward(
        self, saved: Any, grads: Sequence[torch.Tensor | None]
    ) -> Sequence[torch.Tensor | None]:
        """The gradients for ``inputs`` from the outputs' gradients (``None``: unused output)."""


class _FunctionRecord(NamedTuple):
    function: TapeFunction
    saved: Any
    inputs: tuple[torch.Tensor, ...]
    outputs: tuple[torch.Tensor, ...]


_ONE = torch.ones(())
_set_grad_enabled = internals.set_grad_enabled
_backward = internals.run_backward


def _send(
    inputs: torch.Tensor, grad: torch.Tensor, pending: list[tuple[torch.Tensor, torch.Tensor]]
) -> None:
    """Hand ``grad`` (d loss / d ``inputs``) on: into a leaf's ``.grad``, or to ``pending``."""
    if inputs.grad_fn is None:  # a leaf, e.g. another trunk's output
        inputs.grad = grad if inputs.grad is None else inputs.grad + grad
    else:
        pending.append((inputs, grad))


def _send_all(pending: list[tuple[torch.Tensor, torch.Tensor]], keep_graph: bool) -> None:
    """Back-propagate the pending input gradients through autograd, in one engine call."""
    tensors, grads = zip(*pending, strict=True)
    _backward(tensors, grads, keep_graph)


class GradTape:
    """Calls networks inside a loss; :meth:`backward` gives the gradients of ``loss.backward()``.

    Args:
        fast: Use the graph-free path for qualifying modules (``False`` calls
            every module normally: plain autograd). Defaults to ``True`` outside
            :func:`autograd_only`.
    """

    def __init__(self, fast: bool | None = None) -> None:
        self.fast = _FAST[-1] if fast is None else fast
        self._records: list[_Record | _FunctionRecord] = []

    def __call__(
        self, module: nn.Module, *inputs: Any, params: bool = True, **kwargs: Any
    ) -> torch.Tensor:
        """``module(torch.cat(inputs, -1))``, recorded for :meth:`backward` when graph-free.

        Args:
            module: The sub-network to run.
            *inputs: Its input tensor, or several that it reads concatenated
                along the last dimension (each may carry an autograd graph).
            params: Whether this call's parameter gradients are wanted (``False``
                for a critic that only passes gradients through to an actor).
            **kwargs: Forwarded to the module (e.g. ``noise`` for noisy layers).
        """
        tensors = all(isinstance(x, torch.Tensor) for x in inputs)
        chain = chain_of(module) if self.fast and tensors else None
        if chain is None:
            x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1)
            return module.forward(x, **kwargs)
        noise = bool(kwargs.get("noise", True))
        if not torch.is_grad_enabled():
            x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1)
            return chain.forward(x, noise=noise)
        saved: list[tuple] = []
        _set_grad_enabled(False)  # cheaper than a no_grad() context on this hot path
        try:
            x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1)
            out = chain.forward(x, saved, noise=noise)
        finally:
            _set_grad_enabled(True)
        out.requires_grad_(True)
        self._records.append(_Record(chain, saved, inputs, out, params))
        return out

    def stacked(
        self, modules: Sequence[nn.Module], *inputs: torch.Tensor, params: bool = True
    ) -> torch.Tensor:
        """``torch.stack([module(torch.cat(inputs, -1)) for module in modules])``, batched.

        Same-shaped chain modules (twin critics) run as one :class:`ModuleStack`;
        otherwise each module goes through :meth:`__call__` in turn.

        Args:
            modules: The members, each reading the same inputs.
            *inputs: ``[B, d]`` tensors shared by all members, or ``[N, B, d]``
                ones with a slice per member.
            params: Whether the members' parameter gradients are wanted.
        """
        n = len(modules)
        stack = None
        if self.fast and all(x.dim() == 2 or (x.dim() == 3 and x.shape[0] == n) for x in inputs):
            stack = stacked_chain_of(modules)
        if stack is None:
            return torch.stack(
                [self(m, *(x if x.dim() == 2 else x[i] for x in inputs), params=params)
                 for i, m in enumerate(modules)]
            )  # fmt: skip
        grad = torch.is_grad_enabled()
        _set_grad_enabled(False)
        try:
            if len(inputs) == 1:
                x = inputs[0]
            elif all(x.dim() == 2 for x in inputs):  # shared by all members: joined once
                x = torch.cat(inputs, -1)
            else:
                batch = next((x.shape[:2] for x in inputs if x.dim() == 3), (n, inputs[0].shape[0]))
                x = torch.cat([x if x.dim() == 3 else x.expand(*batch, -1) for x in inputs], -1)
            saved: list[tuple] | None = [] if grad else None
            out = stack.forward(x, saved)
        finally:
            _set_grad_enabled(grad)
        if grad:
            out.requires_grad_(True)
            self._records.append(_Record(stack, saved, inputs, out, params))
        return out

    def apply(self, function: TapeFunction, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``function``'s outputs for ``inputs``, recorded for :meth:`backward` when graph-free.

        Outputs come back as fresh leaves; :meth:`backward` hands their gradients
        to ``function.backward`` and passes the result on to the inputs (a
        trunk's output, or anything autograd can differentiate).
        """
        if not (self.fast and torch.is_grad_enabled()):
            return function.forward(*inputs)[0]
        _set_grad_enabled(False)
        try:
            outputs, saved = function.forward(*inputs)
        finally:
            _set_grad_enabled(True)
        for out in outputs:
            out.requires_grad_(True)
        self._records.append(_FunctionRecord(function, saved, inputs, tuple(outputs)))
        return outputs

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate a scalar ``loss`` through the loss expression, then each trunk."""
        records, self._records = self._records, []
        one = _ONE if loss.dtype == _ONE.dtype and loss.device == _ONE.device else _ONE.to(loss)
        # A trunk input computed by autograd (e.g. a sampled action fed to a critic) may share
        # graph with the loss, and several trunks may read it: keep the graph for their passes.
        keep = any(x.grad_fn is not None for record in records for x in record.inputs)
        _backward((loss,), (one,), keep)
        previous = torch.is_grad_enabled()
        _set_grad_enabled(False)
        try:
            self._backward_records(records, keep)
        finally:
            _set_grad_enabled(previous)

    @staticmethod
    def _backward_records(
        records: list[_Record | _FunctionRecord], keep_graph: bool = False
    ) -> None:
        # Gradients of inputs computed by autograd go on in one engine call per run of
        # records, made just before a record (which may be upstream of them) is read.
        pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        for record in reversed(records):
            if pending:
                _send_all(pending, keep_graph)
                pending = []
            if isinstance(record, _FunctionRecord):
                grads = [out.grad for out in record.outputs]
                if all(g is None for g in grads):
                    continue
                input_grads = record.function.backward(record.saved, grads)
                for x, g in zip(record.inputs, input_grads, strict=True):
                    if g is not None and x.requires_grad:
                        _send(x, g, pending)
                continue
            grad = record.output.grad
            if grad is None:
                continue
            wanted = [x.requires_grad for x in record.inputs]
            if not (any(wanted) or record.param_grads):
                continue
            # only the columns of the inputs that want a gradient (a critic's action, not
            # its detached latent) go through the first layer's input-gradient product
            bounds, start = [], 0
            for x in record.inputs:
                bounds.append((start, start + x.shape[-1]))
                start += x.shape[-1]
            lo = next((b[0] for b, want in zip(bounds, wanted, strict=True) if want), 0)
            hi = max((b[1] for b, want in zip(bounds, wanted, strict=True) if want), default=0)
            cols = None if (lo, hi) == (0, start) else slice(lo, hi)
            grad_in = record.chain.backward(
                grad,
                record.saved,
                record.output,
                param_grads=record.param_grads,
                input_grad=any(wanted),
                input_cols=cols,
            )
            if not any(wanted):
                continue
            if len(record.inputs) == 1:
                _send(record.inputs[0], _unbroadcast(record.inputs[0], grad_in), pending)
                continue
            for x, want, (begin, end) in zip(record.inputs, wanted, bounds, strict=True):
                if want:
                    _send(x, _unbroadcast(x, grad_in[..., begin - lo : end - lo]), pending)
        if pending:
            _send_all(pending, keep_graph)


def _unbroadcast(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``grad`` summed over the member dimension a shared input of a stacked chain gained."""
    return grad.sum(0) if grad.dim() > x.dim() else grad


def run(module: nn.Module, x: Any, tape: GradTape | None = None, **kwargs: Any) -> Any:
    """``module.forward(x)``, through ``tape`` when one is given."""
    if tape is None:
        return module.forward(x, **kwargs)
    return tape(module, x, **kwargs)
