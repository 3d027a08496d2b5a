"""Rollout fine-tuning of LLMs: the shared base, LLM REINFORCE and LLM PPO (the GRPO
family is in :mod:`agilerl.algorithms.grpo`).

All sample completions, score them, and take clipped policy-gradient steps on
the generated tokens; they differ in the advantage:

* GRPO: each completion's reward minus its group's mean (optionally divided
  by the group's std); groups whose rewards are all equal carry no signal,
  are counted in ``frac_reward_zero_std`` and optionally dropped
  (``filter_zero_adv``).
* LLM REINFORCE: the reward minus a baseline, the batch's mean reward.
* LLM PPO: GAE over the generated tokens with a learned value head; the
  token rewards are minus ``beta`` times the per-token KL to the reference
  plus the episode reward on the last token; the value loss is clipped.

The per-token objective (one function, :meth:`RolloutLLMAlgorithm.loss`) is
``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` (GRPO's ``clip_coef_high``
raises the upper bound: clip-higher) plus, for GRPO and REINFORCE, ``beta``
times the k3 estimate of the KL to the reference policy (the base model with
the adapter disabled, or the frozen ``"reference"`` adapter), averaged over
the mini-batch's generated tokens (GRPO's ``loss_norm`` picks the average).
The ratio's "old" log-probs are the sampler's, so no extra forward pass is
needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch

from agilerl.algorithms.core.ppo_objective import (
    approx_kl,
    clipped_surrogate,
    outside_clip,
    value_error,
)
from agilerl.algorithms.llm_dataset import DatasetLLMAlgorithm
from agilerl.arena.models.algorithms import (
    LLMAlgorithmSpec,
    LLMPPOSpec,
    LLMREINFORCESpec,
)
from agilerl.arena.models.fsdp import FSDPConfig
from agilerl.components.advantages import gae_torch
from agilerl.llm import distributed
from agilerl.llm.constraints import GenerationControls
from agilerl.llm.generation import SamplingSettings, generate, token_logps
from agilerl.llm.importance import diverged_sequences, pooled_log_ratio
from agilerl.llm.model import reference_policy
from agilerl.llm.prefix import prefix_token_logps, shared_prefixes
from agilerl.llm.rollout import Sample, collate, collect, pad_rows
from agilerl.llm.rollout_env import RolloutEnv
from agilerl.llm.row_chunks import forward_by_row_chunks


class RolloutLLMAlgorithm(DatasetLLMAlgorithm):
    """Generation, the shared clipped objective and the update loop of rollout algorithms."""

    needs_reference: ClassVar[bool] = True

    def __init__(self, spec: LLMAlgorithmSpec, **kwargs: Any) -> None:
        super().__init__(spec, **kwargs)
        self.generator: Any = None
        """``None``: HF ``generate``; else a :class:`~agilerl.llm.vllm_engine.VLLMGenerator`."""
        self.weight_sync_interval = 1
        """Sampling rounds a vLLM engine may serve a version of the adapter before a sync."""
        if getattr(spec, "use_vllm", False):
            from agilerl.llm.vllm_engine import VLLMGenerator

            self.generator = VLLMGenerator.shared(spec)

    # --- parameters -------------------------------------------------------------------
    def _named_trainable(self) -> dict[str, torch.nn.Parameter]:
        """LoRA tensors plus ``modules_to_save`` copies (e.g. a trainable ``lm_head``)."""
        if not self.is_peft:
            return super()._named_trainable()
        tag = f".{self.adapter_name}."
        return {
            n.replace(tag, ".{adapter}."): p
            for n, p in self.actor.named_parameters()
            if tag in n and ("lora_" in n or "modules_to_save" in n)
        }

    @property
    def group_size(self) -> int:
        """Completions per prompt (1 unless the spec has ``group_size``)."""
        return int(getattr(self.spec, "group_size", 1))

    # --- generation -----------------------------------------------------------------------
    def sampling(self, *, greedy: bool = False) -> SamplingSettings:
        """Sampling settings from the spec (greedy for evaluation)."""
        spec = self.spec
        cap = spec.max_output_tokens or spec.max_model_len
        return SamplingSettings(
            max_new_tokens=cap,
            temperature=spec.temperature,
            top_p=spec.top_p,
            top_k=spec.top_k,
            min_p=spec.min_p,
            repetition_penalty=spec.repetition_penalty,
            min_new_tokens=spec.min_output_tokens,
            stop_strings=(spec.vllm_config.stop_sequences if spec.vllm_config else None),
            greedy=greedy,
            chunk_size=spec.hf_generate_chunk_size,
            max_model_len=spec.max_model_len,
            controls=GenerationControls(
                thinking_token_budget=spec.thinking_token_budget,
                answer_pattern=spec.constrain_answer_pattern,
                answer_continuation=spec.answer_continuation,
            ),
        )

    def rollout(
        self,
        env: RolloutEnv,
        rows: list[dict[str, Any]],
        *,
        greedy: bool = False,
        group_size: int | None = None,
    ) -> list[Sample]:
        """Play ``group_size`` episodes per row with this agent's adapter.

        With vLLM generating, the samples' ``old_logps`` are recomputed by the
        trainer's model (the ratio's reference) and vLLM's own log-probs are
        kept under ``extra["sampler_logps"]`` for the importance-sampling
        correction (``vllm_importance_sampling_correction``).
        """
        self.activate()
        if self.generator is not None:
            self.generator.serve(self, greedy=greedy)
        samples = collect(
            self.actor,
            self.tokenizer,
            env,
            rows,
            group_size=self.group_size if group_size is None else group_size,
            settings=self.sampling(greedy=greedy),
            generator=self.generator or generate,
        )
        if self.generator is not None and not greedy:
            self.prepare_rollout(samples)
        return samples

    def fill_groups(
        self, samples: list[Sample], more: Callable[[int], list[Sample]]
    ) -> list[Sample]:
        """A round's batch from its samples; ``more(k)`` would generate the ``k``-th extra
        round of new prompts (GRPO's dynamic sampling calls it; here the samples stay)."""
        del more
        return samples

    @torch.no_grad()
    def prepare_rollout(self, samples: list[Sample]) -> None:
        """Samples generated by vLLM: the trainer's log-probs become the ratio's old
        log-probs, vLLM's are kept under ``extra["sampler_logps"]``."""
        self.activate()
        was_training = self.actor.training
        self.actor.eval()
        step = self.spec.micro_batch_size_per_gpu or len(samples)
        for start in range(0, len(samples), step):
            chunk = samples[start : start + step]
            logps, _ = self._forward_rows(chunk, keep=max(len(s.ids) for s in chunk) - 1)
            for i, sample in enumerate(chunk):
                row = logps[i, -(len(sample.ids) - 1) :].cpu().tolist()
                sample.extra["sampler_logps"] = torch.tensor(sample.old_logps)
                sample.old_logps = [0.0] + [
                    lp if generated else 0.0
                    for lp, generated in zip(row, sample.action_mask[1:], strict=True)
                ]
        self.actor.train(was_training)

    # --- advantages ---------------------------------------------------------------------------
    def assign_advantages(self, samples: list[Sample]) -> tuple[list[Sample], dict[str, float]]:
        """Set ``sample.advantage``; returns the samples to learn from and metrics."""
        raise NotImplementedError

    # --- update ---------------------------------------------------------------------------------
    def _forward(
        self, batch: dict[str, torch.Tensor], *, hidden: bool = False, keep: int | None = None
    ) -> Any:
        return token_logps(
            self.actor,
            batch["input_ids"].to(self.device),
            batch["attention_mask"].to(self.device),
            temperature=self.spec.temperature,
            keep=keep,
            hidden=hidden,
            position_ids=self.spec.calc_position_embeddings,
            fused=self._fused_logps(),
        )

    def _fused_logps(self) -> bool:
        """``use_liger_loss``, unless FSDP shards the model: its LM head is gathered only
        inside the model's forward, so a sharded run takes log-probs from the logits."""
        return self.spec.use_liger_loss and not self._sharded()

    def _forward_rows(self, rows: list[Sample], *, hidden: bool = False, keep: int) -> Any:
        """Like :meth:`_forward` on ``collate(rows)``; a prompt shared by a group runs once.

        Only the targets from each row's first generated token on are computed
        (the rest are zero); every consumer masks them out. ``algorithm.chunk_rows``
        runs the rows through the model that many at a time.
        """
        if self.spec.chunk_rows is not None and len(rows) > self.spec.chunk_rows:
            return forward_by_row_chunks(
                self._forward_rows, rows, self.spec.chunk_rows, keep=keep, hidden=hidden
            )
        sequences = [s.ids for s in rows]
        starts = [_first_action(s) for s in rows]
        shared = shared_prefixes(sequences, starts)
        checkpointed = self.spec.gradient_checkpointing and torch.is_grad_enabled()
        if (
            shared is None
            or checkpointed
            or distributed.active()
            or not self.spec.calc_position_embeddings
        ):
            # Gradient checkpointing turns the KV cache off. FSDP2 cannot take the two
            # forwards (prefix, rest) before one backward, and data-parallel processes take
            # the whole path alike, so replicated and sharded runs take the same updates.
            batch = collate(rows, self.tokenizer.pad_token_id)
            return self._forward(batch, hidden=hidden, keep=keep)
        return prefix_token_logps(
            self.actor,
            sequences,
            starts,
            shared,
            self.tokenizer.pad_token_id,
            temperature=self.spec.temperature,
            keep=keep,
            hidden=hidden,
            fused=self._fused_logps(),
        )

    @torch.no_grad()
    def prepare(self, rows: list[Sample], env: Any) -> dict[str, Any]:
        """Reference log-probs per sample (only when ``beta > 0``), dropout off."""
        if self.spec.beta <= 0 or self.uses_kl_in_reward:
            return {}
        return {"ref": self._reference_rows(rows)}

    uses_kl_in_reward: ClassVar[bool] = False

    @torch.no_grad()
    def _reference_rows(self, rows: list[Sample]) -> list[torch.Tensor]:
        was_training = self.actor.training
        self.actor.eval()
        self.activate()
        out: list[torch.Tensor] = []
        step = self.spec.micro_batch_size_per_gpu or len(rows)
        with reference_policy(self.actor):
            for start in range(0, len(rows), step):
                chunk = rows[start : start + step]
                logps, _ = self._forward_rows(chunk, keep=max(len(s.ids) for s in chunk) - 1)
                out += [logps[i, -(len(s.ids) - 1) :].cpu() for i, s in enumerate(chunk)]
        self.activate()
        self.actor.train(was_training)
        return out

    def _norm(self, rows: list[Sample]) -> float:
        """What the mini-batch's summed token losses are divided by (``loss_norm``): its
        generated tokens, its sequences (``sequence``; each weighted by ``1 / its tokens``,
        see :meth:`_row_weights`) or sequences x ``max_output_tokens`` (``max_length``)."""
        # Global over data-parallel processes, so summed gradients equal one process's.
        norm = getattr(self.spec, "loss_norm", "accumulation_window")
        if norm == "sequence":
            return float(max(1, distributed.global_sum(len(rows))))
        if norm == "max_length":
            return float(max(1, distributed.global_sum(len(rows)))) * self.spec.max_output_tokens
        return float(max(1, distributed.global_sum(sum(s.num_actions for s in rows))))

    def _row_weights(self, rows: list[Sample]) -> torch.Tensor:
        """``(B, 1)`` weight of each row's summed token losses: ``1 / its generated tokens``
        for ``loss_norm: sequence`` (a sequence's mean), else 1."""
        if getattr(self.spec, "loss_norm", None) != "sequence":
            return torch.ones(len(rows), 1)
        return torch.tensor([[1.0 / max(1, s.num_actions)] for s in rows])

    def _sync_gradients(self) -> None:
        if distributed.active() and distributed.is_sharded(self.actor):
            # FSDP averaged the gradients; the loss is normalised globally, so sum them.
            world = distributed.world_size()
            for param in self.trainable_parameters():
                if param.grad is not None:
                    param.grad.mul_(world)
            return
        distributed.sum_gradients(self.trainable_parameters())

    def shard(self) -> None:
        """Shard the model with FSDP2 across the process group (``spec.fsdp`` settings).

        The optimizer is rebuilt over the sharded parameters. Only for a
        single agent (a population shares one base model).
        """
        config = self.spec.fsdp if self.spec.fsdp is not None else FSDPConfig()
        distributed.fully_shard_model(self.actor, config)
        self.optimizer = self._make_optimizer()
        if config.optim_cpu_offload:
            distributed.offload_optimizer_state(self.optimizer)

    def _before_micro_batch(self, last: bool) -> None:
        """``fsdp.defer_grad_sync``: a sharded model reduce-scatters gradients only in the
        backward of a mini-batch's last micro-batch."""
        if not self._sharded():
            return
        config = self.spec.fsdp if self.spec.fsdp is not None else FSDPConfig()
        distributed.set_gradient_sync(self.actor, last or not config.defer_grad_sync)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Named clones of the trainable tensors (gathered whole when sharded)."""
        return {n: distributed.full(p.detach()).clone() for n, p in self._named_trainable().items()}

    def _sharded(self) -> bool:
        return distributed.active() and distributed.is_sharded(self.actor)

    def checkpoint_state(self) -> dict[str, Any]:
        """Plain-data state; a sharded agent's is gathered whole (every process must call this).

        The result has the unsharded format, so a one-process run (and
        ``torch.load(weights_only=True)``) reads it.
        """
        state = super().checkpoint_state()
        if self._sharded():
            state["trainable"] = {n: t.cpu() for n, t in state["trainable"].items()}
            state["optimizer"] = distributed.full_optimizer_state(self.actor, self.optimizer)
        return state

    def load_checkpoint_state(self, state: dict[str, Any], *, keep_index: bool = False) -> None:
        """Restore :meth:`checkpoint_state`; whole tensors are sharded when the agent is."""
        if not self._sharded():
            super().load_checkpoint_state(state, keep_index=keep_index)
            return
        optimizer_state = state["optimizer"]
        state = {
            **state,
            "trainable": distributed.shard_like(self._named_trainable(), state["trainable"]),
            "optimizer": self.optimizer.state_dict(),
        }
        super().load_checkpoint_state(state, keep_index=keep_index)
        if optimizer_state is not None:  # None: saved without (checkpoint_optimizer=false)
            distributed.load_full_optimizer_state(self.actor, self.optimizer, optimizer_state)
        self._apply_lr()

    def loss(
        self, rows: list[Sample], env: Any, context: dict[str, Any], norm: float
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The clipped surrogate (plus KL and, for PPO, value loss) of one micro-batch."""
        spec = self.spec
        self.activate()
        batch = collate(rows, self.tokenizer.pad_token_id)
        # Targets from the first generated token of any row on (rows are end-aligned).
        generated = batch["action_mask"][:, 1:].any(0).nonzero()
        keep = batch["input_ids"].shape[1] - 1 - (int(generated[0]) if len(generated) else 0)
        logps, states = self._forward_rows(rows, hidden=self.value_head is not None, keep=keep)
        mask = batch["action_mask"][:, -keep:].to(logps.device)
        weights = self._row_weights(rows).to(logps.device)  # per row, like the mask
        old = batch["old_logps"][:, -keep:].to(logps.device)
        advantages = self.token_advantages(rows, context, logps.shape[1]).to(logps.device)
        level, pooling = self.ratio_level()
        log_ratio = pooled_log_ratio((logps - old) * mask, mask, level, pooling)
        ratio = torch.exp(log_ratio)
        metrics: dict[str, float] = {}
        bounds = getattr(spec, "off_policy_token_mask_bounds", None)
        if bounds is not None:
            low, high = bounds
            mask = mask * ((ratio.detach() >= low) & (ratio.detach() <= high)).float()
        threshold = getattr(spec, "off_policy_sequence_mask_threshold", None)
        if threshold is not None:
            sequence_advantage = (advantages * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            dropped = diverged_sequences(logps, old, mask, sequence_advantage, threshold)
            mask = mask * (~dropped).float()[:, None]
            metrics["masked_sequences"] = float(dropped.sum())
        kl = None
        if "ref" in context:
            ref = pad_rows(context["ref"], logps.shape[1]).to(logps.device)
            delta = ref - logps
            kl = approx_kl(torch.exp(delta), delta)
            if getattr(spec, "use_bias_correction_kl", False):
                kl = kl * ratio.detach()
            if getattr(spec, "kl_clamp", None) is not None:
                kl = kl.clamp(max=spec.kl_clamp)
            metrics["kl"] = float((kl.detach() * mask * weights).sum() / norm)
        shaped = kl is not None and getattr(spec, "use_kl_advantage_shaping", False)
        if shaped:  # the KL becomes a per-token penalty on the advantage, not a loss term
            advantages = advantages - spec.beta * kl.detach()
        per_token = self.surrogate(ratio, advantages, logps)
        if self.generator is not None and spec.vllm_importance_sampling_correction:
            per_token = per_token * self._sampler_weights(rows, old, mask).to(per_token.device)
        if kl is not None and not shaped:
            per_token = per_token + spec.beta * kl
        loss = (per_token * mask * weights).sum() / norm
        if self.value_head is not None:
            value_loss = self.value_loss(rows, context, states, mask, norm)
            loss = loss + spec.vf_coef * value_loss
            metrics["value_loss"] = float(value_loss.detach())
        low, high = self.clip_range()
        clip_frac = outside_clip(ratio.detach(), low, high).float()
        metrics.update(
            loss=float(loss.detach()),
            clip_fraction=float((clip_frac * mask * weights).sum() / norm),
        )
        return loss, metrics

    def ratio_level(self) -> tuple[str, str]:
        """Where the importance ratio is taken (``token``, ``turn``, ``trajectory``) and how a
        span's token log-ratios pool (``mean``, ``sum``); see :mod:`agilerl.llm.importance`."""
        level = getattr(self.spec, "importance_sampling_level", None)
        pooling = getattr(self.spec, "turn_ratio_pooling", "mean")
        return ("token" if level in (None, "auto") else level), pooling

    def clip_range(self) -> tuple[float, float]:
        """``(eps_low, eps_high)``: the ratio is clipped to ``[1 - eps_low, 1 + eps_high]``
        (``clip_coef`` both ways unless the spec sets ``clip_coef_high``: clip-higher)."""
        low = self.spec.clip_coef
        high = getattr(self.spec, "clip_coef_high", None)
        return low, (low if high is None else high)

    def surrogate(
        self, ratio: torch.Tensor, advantages: torch.Tensor, logps: torch.Tensor
    ) -> torch.Tensor:
        """The per-token policy loss: PPO's clipped surrogate (asymmetric with clip-higher)."""
        del logps
        low, high = self.clip_range()
        return clipped_surrogate(ratio, advantages, 1 - low, 1 + high)

    def _micro_norm(self, micro_rows: list[Sample], norm: float, micro_batches: int) -> float:
        """``loss_norm``: ``micro_batch`` averages each micro-batch over its own tokens (the
        mini-batch's loss is their mean); otherwise the mini-batch's token count."""
        if getattr(self.spec, "loss_norm", "accumulation_window") == "micro_batch":
            return self._norm(micro_rows) * micro_batches
        return norm

    def _sampler_weights(
        self, rows: list[Sample], old: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Truncated importance weights ``min(pi_old / pi_vllm, cap)`` per generated token:
        the update's reference is the trainer's model, the samples came from vLLM's."""
        width = old.shape[1]
        sampler = pad_rows([s.extra["sampler_logps"][1:] for s in rows], width)
        weights = torch.exp(old.cpu() - sampler).clamp(max=self.spec.vllm_importance_sampling_cap)
        return torch.where(mask.cpu() > 0, weights, torch.ones_like(weights))

    def token_advantages(
        self, rows: list[Sample], context: dict[str, Any], width: int
    ) -> torch.Tensor:
        """``(B, width)`` advantages aligned with the target tokens (sequence-level here)."""
        return torch.tensor([s.advantage for s in rows], dtype=torch.float32)[:, None].expand(
            -1, width
        )

    value_head: torch.nn.Module | None = None

    def value_loss(self, rows, context, states, mask, norm) -> torch.Tensor:
        """Value loss of one micro-batch (PPO only)."""
        raise NotImplementedError

    def learn(self, samples: list[Sample], env: Any = None) -> dict[str, float]:  # type: ignore[override]
        """One update on a batch of samples: advantages, then ``update_epochs`` of mini-batches.

        Args:
            samples: What :meth:`rollout` returned for a batch of prompts.
            env: Unused (the samples carry their tokens).

        Returns:
            Training metrics: loss, KL, clip fraction, reward statistics, ...
        """
        rewards = torch.tensor([s.reward for s in samples])
        kept, metrics = self.assign_advantages(samples)
        metrics = {
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "completion_tokens": float(sum(s.num_actions for s in samples) / len(samples)),
            **metrics,
        }
        if not distributed.global_sum(len(kept)):
            self.steps += len(samples)
            self.batches += 1
            return {**metrics, "loss": 0.0}
        update = super().learn(kept, env)
        self.steps += len(samples) - len(kept)
        summed = ("loss", "kl", "clip_fraction", "value_loss")
        return distributed.reduce_metrics({**metrics, **update}, summed)


class LLMREINFORCE(RolloutLLMAlgorithm):
    """REINFORCE with a baseline (the batch's mean reward) and ratio clipping."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = LLMREINFORCESpec

    def assign_advantages(self, samples: list[Sample]) -> tuple[list[Sample], dict[str, float]]:
        """Reward minus the batch mean."""
        rewards = torch.tensor([s.reward for s in samples])
        baseline = float(rewards.mean())
        for sample in samples:
            sample.advantage = sample.reward - baseline
        return samples, {"baseline": baseline}


class LLMPPO(RolloutLLMAlgorithm):
    """PPO with a value head on the last hidden state, GAE over generated tokens."""

    spec_class: ClassVar[type[LLMAlgorithmSpec]] = LLMPPOSpec
    uses_kl_in_reward: ClassVar[bool] = True

    def _make_optimizer(self) -> torch.optim.Optimizer:
        hidden = self.actor.config.hidden_size if hasattr(self.actor, "config") else None
        hidden = hidden or self.actor.get_base_model().config.hidden_size
        self.value_head = torch.nn.Linear(hidden, 1).to(self.device)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)
        critic_lr = self.spec.lr_critic if self.spec.lr_critic is not None else self.spec.lr_actor
        actor = [p for n, p in self._named_trainable().items() if not n.startswith("value_head.")]
        return torch.optim.AdamW(
            [
                {"params": actor, "lr": self.spec.lr_actor},
                {"params": list(self.value_head.parameters()), "lr": critic_lr},
            ]
        )

    def _apply_lr(self) -> None:
        critic = self.spec.lr_critic if self.spec.lr_critic is not None else self.spec.lr_actor
        self.optimizer.param_groups[0]["lr"] = float(self.spec.lr_actor)
        self.optimizer.param_groups[1]["lr"] = float(critic)

    def _named_trainable(self) -> dict[str, torch.nn.Parameter]:
        named = super()._named_trainable()
        if self.value_head is not None:
            named.update({f"value_head.{n}": p for n, p in self.value_head.named_parameters()})
        return named

    @torch.no_grad()
    def prepare(self, rows: list[Sample], env: Any) -> dict[str, Any]:
        """Old values, reference log-probs, and GAE advantages and returns per token."""
        spec = self.spec
        ref = self._reference_rows(rows) if spec.beta > 0 else None
        was_training = self.actor.training
        self.actor.eval()
        self.activate()
        step = spec.micro_batch_size_per_gpu or len(rows)
        values: list[torch.Tensor] = []
        for start in range(0, len(rows), step):
            chunk = rows[start : start + step]
            _, states = self._forward(collate(chunk, self.tokenizer.pad_token_id), hidden=True)
            v = self.value_head(states.float()).squeeze(-1).cpu()
            values += [v[i, -(len(s.ids) - 1) :] for i, s in enumerate(chunk)]
        self.actor.train(was_training)
        advantages, returns = [], []
        for i, sample in enumerate(rows):
            mask = torch.tensor(sample.action_mask[1:], dtype=torch.bool)
            old = torch.tensor(sample.old_logps[1:])
            rewards = torch.zeros(int(mask.sum()))
            if ref is not None:
                rewards -= spec.beta * (old[mask] - ref[i][mask]).clamp(
                    -(spec.kl_clamp or 1e9), spec.kl_clamp or 1e9
                )
            if len(rewards):
                rewards[-1] += sample.reward
            not_done = torch.ones(len(rewards), dtype=torch.bool)
            not_done[-1:] = False  # the episode ends at its last generated token
            adv, _ = gae_torch(rewards, values[i][mask], not_done, 0.0, spec.gamma, spec.gae_lambda)
            full_adv = torch.zeros(len(mask))
            full_adv[mask] = adv
            full_ret = torch.zeros(len(mask))
            full_ret[mask] = adv + values[i][mask]
            advantages.append(full_adv)
            returns.append(full_ret)
        if spec.whiten_advantages:
            flat = torch.cat(
                [
                    a[torch.tensor(s.action_mask[1:], dtype=torch.bool)]
                    for a, s in zip(advantages, rows, strict=True)
                ]
            )
            if flat.numel() > 1:
                mean, std = flat.mean(), flat.std() + 1e-8
                advantages = [(a - mean) / std for a in advantages]
        return {"values": values, "advantages": advantages, "returns": returns}

    def assign_advantages(self, samples: list[Sample]) -> tuple[list[Sample], dict[str, float]]:
        """Token advantages come from :meth:`prepare` (GAE); nothing to do per sample."""
        return samples, {}

    def token_advantages(
        self, rows: list[Sample], context: dict[str, Any], width: int
    ) -> torch.Tensor:
        """GAE advantages aligned with the target tokens."""
        return pad_rows(context["advantages"], width)

    def value_loss(self, rows, context, states, mask, norm) -> torch.Tensor:
        """Clipped value loss ``max((v - R)^2, (v_clip - R)^2)`` over generated tokens (the
        rollout's values clipped by ``clip_coef``)."""
        width = mask.shape[1]
        values = self.value_head(states.float()).squeeze(-1)
        old = pad_rows(context["values"], width).to(values.device)
        returns = pad_rows(context["returns"], width).to(values.device)
        loss = value_error(values, returns, old, self.spec.clip_coef)
        return (loss * mask).sum() / norm


def _first_action(sample: Sample) -> int:
    """Index of the sample's first generated token (its last token if none was generated)."""
    try:
        return max(1, sample.action_mask.index(1))
    except ValueError:
        return len(sample.ids) - 1
