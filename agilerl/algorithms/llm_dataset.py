"""Teacher-forced LLM fine-tuning over dataset rows: SFT and DPO.

Both share one update (:meth:`DatasetLLMAlgorithm.learn`): a batch of rows is
split into mini-batches (one optimizer step each) and those into
micro-batches (one forward/backward each, gradients accumulated), repeated
``update_epochs`` times. Only the loss differs:

* SFT: next-token cross-entropy on the response tokens, averaged per token.
* DPO: ``-log sigmoid(beta * ((log pi_c - log pi_r) - (log ref_c - log ref_r)))``
  plus ``nll_alpha`` times the chosen response's per-token NLL; the
  reference log-probs are computed once per batch without gradients.

Hyperparameters are read from ``self.spec`` (the validated spec).
"""

from __future__ import annotations

import copy
import itertools
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from agilerl.algorithms.core.base import LLMAlgorithm
from agilerl.arena.models.algorithms import DPOSpec, LLMAlgorithmSpec, SFTSpec
from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.llm.datasets import LLMDatasetEnv, TokenisedRow, render_prompt
from agilerl.llm.model import (
    ACTOR_ADAPTER,
    REFERENCE_ADAPTER,
    add_lora,
    copy_adapter,
    enable_gradient_checkpointing,
    load_causal_lm,
    offloaded_activations,
    reference_policy,
    seed_everything,
    sequence_logprobs,
)
from agilerl.llm.packing import check_packing_isolates, packed_logprobs, padded_positions

CHECKPOINT_FORMAT = "agilerl.llm_dataset"
CHECKPOINT_VERSION = 1


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class DatasetLLMAlgorithm(LLMAlgorithm):
    """Shared model handling, update loop and checkpoints of SFT and DPO.

    Args:
        spec: The validated algorithm spec (hyperparameters are read from it).
        tokenizer: The model's tokenizer.
        actor_network: A pre-built model (used as given); otherwise the model
            is loaded from ``spec.pretrained_model_name_or_path`` and wrapped
            in LoRA when ``spec.lora_config`` is set.
        index: Population slot. Slot 0 trains peft's ``"default"`` adapter,
            slot ``i`` an ``"agent_i"`` adapter, so a population can share one
            base model: pass agent 0's ``actor`` as ``actor_network`` and each
            agent adds its own adapter to it.
        device: Torch device.
    """

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = LLMAlgorithmSpec
    needs_reference: ClassVar[bool] = False

    def __init__(
        self,
        spec: LLMAlgorithmSpec,
        *,
        tokenizer: Any,
        actor_network: Any = None,
        index: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(spec, index=index, device=device)
        self.batches = 0
        """:meth:`learn` calls taken: dataset batches, or rollout rounds (the loops' step)."""
        self.weights_version = 0
        """Bumped whenever the trainable weights may change (an optimizer step, a load, a
        parameter-noise mutation): a generation engine holding a copy knows it is stale."""
        self.weights_loaded = False
        """Set when another state was loaded (evolution): a copy must be replaced at once."""
        if tokenizer is None:
            raise ValueError(f"{type(self).__name__} needs a tokenizer")
        self.tokenizer = tokenizer
        if spec.activation_offload and self.device.type != "cuda":
            raise ConfigError(
                [
                    Problem(
                        "algorithm.activation_offload",
                        f"needs a CUDA device (this run trains on {self.device}, where "
                        "activations already sit in host memory); remove it and keep "
                        "algorithm.gradient_checkpointing: true to cut activation memory",
                    )
                ]
            )
        self.adapter_name = ACTOR_ADAPTER if index == 0 else f"agent_{index}"
        seed_everything(spec.seed + index)
        self.actor = actor_network if actor_network is not None else self._load_actor()
        self._ensure_adapter()
        if self.needs_reference:
            self._ensure_reference()
        if spec.gradient_checkpointing:
            enable_gradient_checkpointing(self.actor)
        if spec.use_sequence_packing:
            check_packing_isolates(self.actor)
        self.positions = 0
        """Token positions the forward passes computed (see :meth:`_collate`)."""
        self.padding = 0
        """How many of :attr:`positions` were padding."""
        self.optimizer = self._make_optimizer()

    def _make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.trainable_parameters(), lr=self.spec.lr)

    def _apply_lr(self) -> None:
        """Set the optimizer's learning rate(s) from the spec."""
        for group in self.optimizer.param_groups:
            group["lr"] = float(self.spec.lr)

    # --- model ---------------------------------------------------------------------
    def _load_actor(self) -> Any:
        spec = self.spec
        if spec.pretrained_model_name_or_path is None:
            raise ConfigError(
                [
                    Problem(
                        "network.pretrained_model_name_or_path",
                        "set the model to fine-tune (a local folder works offline)",
                    )
                ]
            )
        model = load_causal_lm(
            spec.pretrained_model_name_or_path,
            attn_implementation=spec.attn_implementation,
            device=self.device,
            quantization=spec.quantization,
        )
        if spec.lora_config is None:
            return model
        from agilerl.builders.llm import to_peft_lora

        return add_lora(
            model,
            to_peft_lora(spec.lora_config.model_dump()),
            separate_reference=spec.use_separate_reference_adapter and self.needs_reference,
            adapter_name=self.adapter_name,
        )

    @property
    def is_peft(self) -> bool:
        """Whether the actor is a ``peft.PeftModel`` (LoRA)."""
        from peft import PeftModel

        return isinstance(self.actor, PeftModel)

    def _ensure_adapter(self) -> None:
        """Add this slot's adapter to a shared LoRA model that lacks it."""
        if not self.is_peft or self.adapter_name in self.actor.peft_config:
            return
        if self.index == 0:
            # A user's pre-built adapter under another name is the one to train.
            self.adapter_name = self.actor.active_adapter
            return
        config = next(c for n, c in self.actor.peft_config.items() if n != REFERENCE_ADAPTER)
        self.actor.add_adapter(self.adapter_name, config)

    def activate(self) -> None:
        """Make this agent's adapter the active one (a no-op without LoRA)."""
        if self.is_peft and self.actor.active_adapter != self.adapter_name:
            self.actor.set_adapter(self.adapter_name)

    def _ensure_reference(self) -> None:
        from peft import PeftModel

        if not isinstance(self.actor, PeftModel):
            raise ConfigError(
                [
                    Problem(
                        "network.lora_config",
                        f"{self.spec.name} needs a reference policy; full fine-tuning has none "
                        "here, so set a LoRA adapter",
                    )
                ]
            )
        wants_separate = self.spec.use_separate_reference_adapter
        if wants_separate and REFERENCE_ADAPTER not in self.actor.peft_config:
            self.actor.add_adapter(REFERENCE_ADAPTER, self.actor.peft_config[self.adapter_name])
            copy_adapter(self.actor, self.adapter_name, REFERENCE_ADAPTER)
            self.actor.set_adapter(self.adapter_name)
            for name, param in self.actor.named_parameters():
                if f".{REFERENCE_ADAPTER}." in name:
                    param.requires_grad_(False)

    def _named_trainable(self) -> dict[str, torch.nn.Parameter]:
        """This agent's trainable tensors, named with the slot-independent ``{adapter}``."""
        if not self.is_peft:
            return {n: p for n, p in self.actor.named_parameters() if p.requires_grad}
        tag = f".{self.adapter_name}."
        return {
            n.replace(tag, ".{adapter}."): p
            for n, p in self.actor.named_parameters()
            if tag in n and "lora_" in n
        }

    def policy_weights(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The 2-D trainable tensors parameter-noise mutations perturb (this agent's adapter).

        Handing them out counts as a change of the weights (:attr:`weights_loaded`).
        """
        self.weights_version += 1
        self.weights_loaded = True
        return [(n, p) for n, p in self._named_trainable().items() if p.dim() == 2]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates (this agent's LoRA tensors under LoRA)."""
        return list(self._named_trainable().values())

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Named clones of the trainable tensors (names do not depend on the population slot)."""
        return {n: p.detach().clone() for n, p in self._named_trainable().items()}

    # --- losses ----------------------------------------------------------------------
    def _collate(self, rows: list[TokenisedRow], env: LLMDatasetEnv) -> dict[str, torch.Tensor]:
        """The batch of ``rows``: packed with ``use_sequence_packing``, else padded.

        Counts the token positions and padding it makes the forward compute
        (:attr:`positions`, :attr:`padding`).
        """
        batch = env.collate_packed(rows) if self.spec.use_sequence_packing else env.collate(rows)
        positions, padding = padded_positions(batch)
        self.positions += positions
        self.padding += padding
        return batch

    def _logps(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token log-probs and loss mask of each sequence under this agent's adapter."""
        self.activate()
        return self._reference_logps(batch)

    def _reference_logps(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Like :meth:`_logps` but without re-activating this agent's adapter."""
        spec = self.spec
        batch = {k: v.to(self.device) for k, v in batch.items()}
        options = {
            "fp32": spec.cast_logprobs_to_fp32,
            "fused": spec.use_liger_loss,
            "chunk_rows": spec.chunk_rows,
        }
        if "position_ids" in batch:  # packed
            return packed_logprobs(self.actor, batch, **options)
        return sequence_logprobs(
            self.actor,
            batch["input_ids"],
            batch["attention_mask"],
            batch["loss_mask"],
            position_ids=spec.calc_position_embeddings,
            **options,
        )

    def prepare(self, rows: list[TokenisedRow], env: LLMDatasetEnv) -> dict[str, Any]:
        """Per-batch quantities computed once, before the update (e.g. reference log-probs)."""
        return {}

    def loss(
        self, rows: list[TokenisedRow], env: LLMDatasetEnv, context: dict[str, Any], norm: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss of one micro-batch, scaled so micro-batch losses sum to the mini-batch mean."""
        raise NotImplementedError

    def _micro_norm(self, micro_rows: list[Any], norm: float, micro_batches: int) -> float:
        """What one micro-batch's loss is divided by (the mini-batch's ``norm`` here)."""
        return norm

    def _before_micro_batch(self, last: bool) -> None:
        """Called before each micro-batch's forward (``last``: the mini-batch's final one)."""

    def _norm(self, rows: list[TokenisedRow]) -> float:
        """What a mini-batch's loss is averaged over (rows here; tokens for SFT)."""
        return float(len(rows))

    # --- update ----------------------------------------------------------------------
    def learn(self, rows: list[TokenisedRow], env: LLMDatasetEnv) -> dict[str, float]:
        """One update on a batch of rows: ``update_epochs`` passes of accumulated mini-batches.

        Args:
            rows: ``batch_size`` rows from the dataset env.
            env: The env (for collation).

        Returns:
            Mean loss and metrics over the update's micro-batches, plus the update's
            ``tokens`` (real tokens through its forward passes) and ``padded_tokens``
            (padding positions they computed besides).
        """
        spec = self.spec
        positions, padding = self.positions, self.padding
        mini = spec.mini_batch_size or len(rows)
        micro = spec.micro_batch_size_per_gpu or mini
        self.actor.train()
        context = self.prepare(rows, env)
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(spec.update_epochs):
            for mini_rows, mini_ctx in zip(
                _chunks(rows, mini), self._split(context, mini), strict=False
            ):
                norm = self._norm(mini_rows)
                micro_batches = _chunks(mini_rows, micro)
                self.optimizer.zero_grad(set_to_none=True)
                for i, (micro_rows, micro_ctx) in enumerate(
                    zip(micro_batches, self._split(mini_ctx, micro), strict=False)
                ):
                    self._before_micro_batch(last=i == len(micro_batches) - 1)
                    micro_norm = self._micro_norm(micro_rows, norm, len(micro_batches))
                    with offloaded_activations(spec.activation_offload):
                        loss, metrics = self.loss(micro_rows, env, micro_ctx, micro_norm)
                    loss.backward()
                    for key, value in metrics.items():
                        totals[key] = totals.get(key, 0.0) + value
                self._sync_gradients()
                if spec.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), spec.max_grad_norm)
                self.optimizer.step()
                self.num_updates += 1
                self.weights_version += 1
                steps += 1
        self.steps += len(rows)
        self.batches += 1
        metrics = {key: value / steps for key, value in totals.items()}
        metrics["padded_tokens"] = float(self.padding - padding)
        metrics["tokens"] = float(self.positions - positions) - metrics["padded_tokens"]
        return metrics

    def _sync_gradients(self) -> None:
        """Combine gradients across data-parallel processes (none in one process)."""

    @staticmethod
    def _split(context: dict[str, Any], size: int) -> Any:
        """Split per-row tensors in ``context`` like the rows (endless ``{}`` if empty)."""
        if not context:
            return itertools.repeat({})
        n = len(next(iter(context.values())))
        return [{k: v[i : i + size] for k, v in context.items()} for i in range(0, n, size)]

    @torch.no_grad()
    def evaluate(self, rows: list[TokenisedRow], env: LLMDatasetEnv, batch_size: int = 16) -> dict:
        """Held-out metrics (no gradients, dropout off), averaged over ``rows``."""
        self.actor.eval()
        totals: dict[str, float] = {}
        for chunk in _chunks(rows, batch_size):
            context = self.prepare(chunk, env)
            _, metrics = self.loss(chunk, env, context, self._norm(rows))
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
        self.actor.train()
        return self._finish_eval(totals, rows)

    def _finish_eval(self, totals: dict[str, float], rows: list[TokenisedRow]) -> dict:
        return totals

    # --- generation --------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompts: list[str], max_new_tokens: int = 32) -> list[str]:
        """Greedy completions of user prompts (chat template applied, left padding).

        Args:
            prompts: User messages.
            max_new_tokens: Cap on generated tokens (also bounded by ``max_model_len``).
        """
        tok = self.tokenizer
        encoded = [
            tok(render_prompt(tok, [{"role": "user", "content": p}]), add_special_tokens=False)[
                "input_ids"
            ]
            for p in prompts
        ]
        width = max(map(len, encoded))
        ids = torch.full((len(encoded), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, seq in enumerate(encoded):
            ids[i, width - len(seq) :] = torch.tensor(seq)
            mask[i, width - len(seq) :] = 1
        budget = max(1, min(max_new_tokens, self.spec.max_model_len - width))
        was_training = self.actor.training
        self.actor.eval()
        self.activate()
        out = self.actor.generate(
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            max_new_tokens=budget,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        self.actor.train(was_training)
        return [tok.decode(seq[width:], skip_special_tokens=True) for seq in out]

    # --- hyperparameters ------------------------------------------------------------------
    def set_hp(self, **changes: Any) -> set[str]:
        """Validated hyperparameter change (e.g. ``lr``, ``beta``); the optimizer follows ``lr``."""
        changed = super().set_hp(**changes)
        self._apply_lr()
        return changed

    def set_hyperparameters(self, **updates: Any) -> None:
        """Same as :meth:`set_hp`."""
        self.set_hp(**updates)

    # --- checkpoints -------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """Plain-data state: spec, trainable tensors, optimizer, counters."""
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "algorithm": type(self).__name__,
            "spec": self.spec.model_dump(mode="json"),
            "trainable": self.trainable_state(),
            "optimizer": self.optimizer.state_dict(),
            "index": self.index,
            "steps": int(self.steps),
            "batches": int(self.batches),
            "num_updates": int(self.num_updates),
            "fitness": [float(f) for f in self.fitness],
        }

    def load_checkpoint_state(self, state: dict[str, Any], *, keep_index: bool = False) -> None:
        """Restore :meth:`checkpoint_state` into this agent.

        Args:
            state: What :meth:`checkpoint_state` returned (possibly of another slot).
            keep_index: Keep this agent's population slot (when copying a parent).

        Raises:
            ValueError: If the state belongs to another algorithm or does not fit.
        """
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("not an agilerl LLM dataset checkpoint")
        if state.get("algorithm") != type(self).__name__:
            raise ValueError(
                f"checkpoint is for {state.get('algorithm')}, not {type(self).__name__}"
            )
        self.spec = type(self.spec).model_validate(state["spec"])
        params = self._named_trainable()
        if set(params) != set(state["trainable"]):
            raise ValueError("checkpoint tensors do not match this model's trainable tensors")
        with torch.no_grad():
            for name, tensor in state["trainable"].items():
                params[name].copy_(tensor)
        if state["optimizer"] is not None:  # None: saved without (checkpoint_optimizer=false)
            self.optimizer.load_state_dict(state["optimizer"])
        self._apply_lr()
        if not keep_index:
            self.index = int(state["index"])
        self.steps = int(state["steps"])
        self.batches = int(state.get("batches", 0))
        self.weights_version += 1
        self.weights_loaded = True
        self.num_updates = int(state["num_updates"])
        self.fitness = list(state["fitness"])

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint state (what the trainer's checkpoint manager stores per agent)."""
        return self.checkpoint_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (see :meth:`load_checkpoint_state`)."""
        self.load_checkpoint_state(state)

    def clone(self, index: int | None = None) -> DatasetLLMAlgorithm:
        """A copy in population slot ``index``: its own adapter on the same base model.

        Adapter weights, optimizer state, hyperparameters and counters are copied.

        Raises:
            ValueError: If ``index`` is this agent's slot (the adapter would be shared).
        """
        if index is None or int(index) == self.index:
            raise ValueError("clone needs another population index (each slot has its own adapter)")
        other = type(self)(
            self.spec,
            tokenizer=self.tokenizer,
            actor_network=self.actor,
            index=int(index),
            device=self.device,
        )
        other.load_checkpoint_state(copy.deepcopy(self.checkpoint_state()), keep_index=True)
        other.fitness = list(self.fitness)
        return other

    def save_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`checkpoint_state` atomically to ``path``."""
        atomic_save(self.checkpoint_state(), path)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Load a file written by :meth:`save_checkpoint` (``weights_only=True``)."""
        state = torch.load(Path(path), map_location=self.device, weights_only=True)
        try:
            self.load_checkpoint_state(state)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"Checkpoint {path} cannot be loaded: {exc}") from exc

    def load_weights(self, path: str | os.PathLike[str]) -> None:
        """Load only the trainable tensors of a checkpoint (the spec's hyperparameters stay)."""
        state = torch.load(Path(path), map_location=self.device, weights_only=True)
        params = self._named_trainable()
        with torch.no_grad():
            for name, tensor in state["trainable"].items():
                params[name].copy_(tensor)

    def export(
        self, out_dir: str | os.PathLike[str], *, merged: bool = False, embeddings: bool = True
    ) -> Path:
        """Write the adapter (``peft.PeftModel.from_pretrained`` loads it), or a merged model.

        Args:
            out_dir: Folder to write.
            merged: Write the base model with the adapter merged in instead.
            embeddings: Let peft add the base model's (unchanged) embedding matrices when a
                LoRA targets them (its ``"auto"``); ``False`` for a reader that has the base
                model already (vLLM), where they would only cost a large write and load.
        """
        from peft import PeftModel

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if not isinstance(self.actor, PeftModel):
            self.actor.save_pretrained(out)
        elif merged:
            model = copy.deepcopy(self.actor)
            for name in [n for n in model.peft_config if n != self.adapter_name]:
                model.delete_adapter(name)
            model.set_adapter(self.adapter_name)
            model.merge_and_unload().save_pretrained(out)
        else:
            with warnings.catch_warnings():
                # "auto" saves tied embedding layers a LoRA targets, and says so every time
                warnings.filterwarnings("ignore", message="Setting `save_embedding_layers`")
                self.actor.save_pretrained(
                    out,
                    selected_adapters=[self.adapter_name],
                    save_embedding_layers="auto" if embeddings else False,
                )
            if self.adapter_name != ACTOR_ADAPTER:
                # peft writes non-default adapters to a subfolder; lift it so
                # PeftModel.from_pretrained(base, out) finds the adapter.
                for item in (out / self.adapter_name).iterdir():
                    os.replace(item, out / item.name)
                (out / self.adapter_name).rmdir()
        self.tokenizer.save_pretrained(out)
        return out


def atomic_save(state: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to a temporary file and move it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(state, handle)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class SFT(DatasetLLMAlgorithm):
    """Supervised fine-tuning: masked next-token cross-entropy on the response."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = SFTSpec

    def _norm(self, rows: list[TokenisedRow]) -> float:
        return float(sum(len(r.completions[0]) for r in rows))

    def loss(
        self, rows: list[TokenisedRow], env: LLMDatasetEnv, context: dict[str, Any], norm: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Sum of response-token NLL over ``rows`` divided by ``norm`` (mini-batch tokens)."""
        logps, _ = self._logps(self._collate(rows, env))
        loss = -logps.sum() / norm
        return loss, {"loss": float(loss.detach())}


class DPO(DatasetLLMAlgorithm):
    """Direct preference optimisation (sigmoid loss) with an optional chosen-NLL term."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = DPOSpec
    needs_reference: ClassVar[bool] = True

    @torch.no_grad()
    def prepare(self, rows: list[TokenisedRow], env: LLMDatasetEnv) -> dict[str, Any]:
        """Reference log-probs of chosen and rejected, once per batch, dropout off."""
        was_training = self.actor.training
        self.actor.eval()
        self.activate()
        with reference_policy(self.actor):
            logps, _ = self._reference_logps(self._collate(rows, env))
        self.actor.train(was_training)
        sums = logps.sum(-1)
        n = len(rows)
        return {"ref_chosen": sums[:n], "ref_rejected": sums[n:]}

    def loss(
        self, rows: list[TokenisedRow], env: LLMDatasetEnv, context: dict[str, Any], norm: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean (over ``norm`` rows) DPO loss plus ``nll_alpha`` times the chosen token NLL."""
        beta = self.spec.beta
        logps, mask = self._logps(self._collate(rows, env))
        n = len(rows)
        sums = logps.sum(-1)
        chosen_reward = beta * (sums[:n] - context["ref_chosen"])
        rejected_reward = beta * (sums[n:] - context["ref_rejected"])
        dpo = -F.logsigmoid(chosen_reward - rejected_reward)
        nll = -sums[:n] / mask[:n].sum(-1).clamp(min=1)
        loss = (dpo + self.spec.nll_alpha * nll).sum() / norm
        margin = (chosen_reward - rejected_reward).detach()
        return loss, {
            "loss": float(loss.detach()),
            "reward_accuracy": float((margin > 0).float().sum() / norm),
            "reward_margin": float(margin.sum() / norm),
            "chosen_reward": float(chosen_reward.detach().sum() / norm),
            "rejected_reward": float(rejected_reward.detach().sum() / norm),
        }
