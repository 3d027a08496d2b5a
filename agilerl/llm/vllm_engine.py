"""Generation with vLLM, colocated in the trainer process, LoRA weights synced through files.

:class:`VLLMGenerator` has the signature of
:func:`agilerl.llm.generation.generate`, so the rollout collects episodes
with it exactly as with HF ``generate``: token ids and the sampler's
log-probs per completion (vLLM's ``processed_logprobs``: after temperature,
the quantity the trainer recomputes). Each population member's adapter is
published to vLLM as a peft folder under a new LoRA id per weight version
(``weight_sync_backend: filesystem``): vLLM loads it at the next generate.
Full-weight syncing needs vLLM's in-place ``load_weights``, which only the
CUDA build supports; :func:`check_vllm` refuses it elsewhere.

The generation controls (``thinking_token_budget``, ``constrain_answer_pattern``,
see :mod:`agilerl.llm.constraints`) act in HF ``generate`` only: vLLM's own
thinking budget and regex decoding do not leave thoughts unconstrained, nor
report which tokens were forced, so :func:`check_controls` refuses them.
A prompt that fills ``max_model_len`` gets an empty completion without
reaching the engine, as with HF ``generate``.

On a CPU, :func:`engine_args` applies defaults that fit a shared machine
(eager mode, a small KV cache, an in-process engine that does not pin the
trainer's threads); ``algorithm.vllm_config`` and ``vllm_engine_args``
override them.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.llm.generation import Completion, SamplingSettings

CPU_ENVIRONMENT = {
    # One process: the engine shares the trainer's memory and needs no __main__ guard.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    # GiB of KV cache on the CPU backend (its default reserves far more).
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # Leave the trainer's OpenMP threads where they are.
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


def check_controls(spec: Any) -> None:
    """Refuse generation controls vLLM generation does not apply.

    Raises:
        ConfigError: Naming each control that is set and what to do instead.
    """
    fields = {
        "thinking_token_budget": getattr(spec, "thinking_token_budget", None) is not None,
        "constrain_answer_pattern": getattr(spec, "constrain_answer_pattern", None) is not None,
    }
    problems = [
        Problem(
            f"algorithm.{name}",
            "acts in HF generate only (vLLM would constrain thoughts too and cannot report "
            "the forced tokens): set algorithm.use_vllm=false, or remove the setting",
        )
        for name, is_set in fields.items()
        if is_set
    ]
    if problems:
        raise ConfigError(problems)


def engine_args(spec: Any, *, cuda: bool, prefix_cache: bool = False) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` for an agent's spec.

    ``vllm_config`` gives the documented settings, CPU defaults fill what a
    CPU needs, and ``vllm_engine_args`` (verbatim) override both. The prefix
    cache is off unless ``prefix_cache`` (``reuse_prefix_cache_across_syncs``):
    a prompt's cached KV was computed in another batch, so with it on the
    samples depend on what the engine generated before (a resumed run, with a
    fresh engine, then samples differently).
    """
    config = spec.vllm_config
    args: dict[str, Any] = {
        "model": str(spec.pretrained_model_name_or_path),
        "max_model_len": spec.max_model_len,
        "seed": spec.seed,
        "logprobs_mode": "processed_logprobs",
        "enable_prefix_caching": prefix_cache,
    }
    if config is not None:
        args.update(
            tensor_parallel_size=config.tensor_parallel_size,
            gpu_memory_utilization=config.gpu_memory_utilization,
            max_num_seqs=config.max_num_seqs,
        )
        for key in ("max_num_batched_tokens", "enforce_eager", "dtype", "quantization"):
            if getattr(config, key) is not None:
                args[key] = getattr(config, key)
        if config.sleep_mode and cuda:
            args["enable_sleep_mode"] = True
    if spec.lora_config is not None:
        rank = int(spec.lora_config.lora_r)
        args.update(
            enable_lora=True,
            max_lora_rank=max(rank, config.max_lora_rank if config else rank),
            max_loras=max(1, config.max_loras if config else 1),
        )
    if not cuda:
        # vLLM's CPU backend reads gpu_memory_utilization as a share of system RAM.
        args.setdefault("enforce_eager", True)
        args["gpu_memory_utilization"] = min(args.get("gpu_memory_utilization", 0.1), 0.1)
        args.setdefault("dtype", "float32")
    args.update(spec.vllm_engine_args)
    return args


class VLLMGenerator:
    """A vLLM engine serving a population's adapters, called like ``generate``.

    Args:
        spec: The agents' spec (model, sampling extras, engine settings).
        export_dir: Where adapter versions are written (``vllm_lora_export_dir``;
            a temporary folder, removed on :meth:`close`, when ``None``).
    """

    def __init__(self, spec: Any, export_dir: str | Path | None = None) -> None:
        check_controls(spec)
        self.spec = spec
        self._owns_dir = export_dir is None
        self.export_dir = Path(export_dir or tempfile.mkdtemp(prefix="agilerl_vllm_lora_"))
        self.export_dir.mkdir(parents=True, exist_ok=True)
        self._llm: Any = None
        self._next_id = 1
        self.adapters: dict[int, tuple[int, Path]] = {}
        """Population slot -> (vLLM LoRA id, adapter folder) of the published version."""
        self.versions: dict[int, int] = {}
        """Population slot -> the weight version (optimizer steps) vLLM serves."""
        self.active: int | None = None
        self.context: tuple[int, int, int] = (0, 0, 0)
        """``(slot, round, turn)`` of the next request (asynchronous engines seed by it)."""
        self.reuse_prefix_cache = False
        """Keep vLLM's prefix cache across rounds and syncs (set before the engine starts)."""
        self._published: dict[int, int] = {}
        self._rounds: dict[int, int] = {}
        self._asleep = False

    @property
    def llm(self) -> Any:
        """The ``vllm.LLM`` engine, started at first use."""
        if self._llm is None:
            cuda = torch.cuda.is_available()
            if not cuda:
                for key, value in CPU_ENVIRONMENT.items():
                    os.environ.setdefault(key, value)
            from vllm import LLM

            # The in-process engine seeds the global RNGs with its own seed at start-up;
            # keep the trainer's streams (a resumed run starts the engine at another point).
            saved = (random.getstate(), np.random.get_state(), torch.get_rng_state())
            saved_cuda = torch.cuda.get_rng_state_all() if cuda else None
            try:
                self._llm = LLM(
                    **engine_args(self.spec, cuda=cuda, prefix_cache=self.reuse_prefix_cache)
                )
            finally:
                random.setstate(saved[0])
                np.random.set_state(saved[1])
                torch.set_rng_state(saved[2])
                if saved_cuda is not None:
                    torch.cuda.set_rng_state_all(saved_cuda)
        return self._llm

    def publish(self, agent: Any) -> None:
        """Write ``agent``'s adapter as a new version and serve it from the next generate.

        The previous version's folder is removed once the new one is written;
        :attr:`versions` records the agent's optimizer step count it carries.
        """

        def write(folder: Path) -> None:
            agent.export(folder, embeddings=False)  # vLLM has the base model's embeddings

        self._install(agent, write, int(agent.num_updates), current=True, rounds=0)

    def _install(self, agent: Any, write: Any, version: int, *, current: bool, rounds: int) -> None:
        """Serve a new adapter version to ``agent``'s slot: ``write(folder)`` writes its
        files under a new LoRA id; the previous version's folder is removed afterwards.

        Args:
            agent: The member.
            write: Writes the adapter folder.
            version: The optimizer step count the adapter carries.
            current: Whether the adapter equals the agent's live weights.
            rounds: Sampling rounds already served with it.
        """
        slot = int(agent.index)
        folder = self.export_dir / f"agent_{slot}_v{self._next_id}"
        write(folder)
        old = self.adapters.get(slot)
        self.adapters[slot] = (self._next_id, folder)
        self._next_id += 1
        self.versions[slot] = version
        self._published[slot] = int(agent.weights_version) if current else -1
        self._rounds[slot] = rounds
        agent.weights_loaded = False
        if old is not None:
            shutil.rmtree(old[1], ignore_errors=True)

    def serve(self, agent: Any, *, greedy: bool = False) -> None:
        """Generate with ``agent``'s adapter from now on, publishing it when it is due.

        A changed adapter is published when the agent has sampled
        ``agent.weight_sync_interval`` rounds with the served version, before a
        greedy (evaluation) rollout, and at once after a load (evolution);
        otherwise the served version may lag the live weights by up to that many
        rounds (its :meth:`staleness`).
        """
        slot = int(agent.index)
        if self.spec.lora_config is not None:
            changed = self._published.get(slot) != int(agent.weights_version)
            due = greedy or agent.weights_loaded
            due = due or self._rounds.get(slot, 0) >= int(getattr(agent, "weight_sync_interval", 1))
            if slot not in self.adapters or (changed and due):
                self.publish(agent)
            if not greedy:
                self._rounds[slot] = self._rounds.get(slot, 0) + 1
        self.active = slot

    def staleness(self, agent: Any) -> int:
        """Optimizer steps ``agent`` has taken since the version vLLM serves for it."""
        return int(agent.num_updates) - self.versions.get(int(agent.index), int(agent.num_updates))

    def served_state(self, slot: int) -> dict[str, Any] | None:
        """What slot ``slot`` is served, as plain data for a checkpoint (``None``: nothing).

        A stop between syncs leaves the served adapter behind the live weights;
        a resumed run must sample with that adapter until its next sync, so the
        checkpoint carries the adapter's files, its version and the rounds
        sampled since it was published.
        """
        if slot not in self.adapters:
            return None
        from safetensors.torch import load_file

        folder = self.adapters[slot][1]
        files = {
            p.name: (load_file(p) if p.suffix == ".safetensors" else p.read_text())
            for p in sorted(folder.iterdir())
            if p.is_file()
        }
        return {"version": self.versions[slot], "rounds": self._rounds.get(slot, 0), "files": files}

    def restore_served(self, agent: Any, state: dict[str, Any]) -> None:
        """Serve :meth:`served_state`'s adapter to ``agent``'s slot again (a resumed run).

        The next :meth:`serve` publishes the live weights exactly when the
        uninterrupted run would have (not at once, as after other loads).
        """
        from safetensors.torch import save_file

        def write(folder: Path) -> None:
            folder.mkdir(parents=True, exist_ok=True)
            for name, content in state["files"].items():
                if isinstance(content, dict):
                    save_file(content, str(folder / name))
                else:
                    (folder / name).write_text(content)

        version = int(state["version"])
        current = version == int(agent.num_updates)
        self._install(agent, write, version, current=current, rounds=int(state["rounds"]))
        self.active = int(agent.index)

    def begin(self, slot: int, round_: int) -> None:
        """Note the member and round the next requests belong to (turn 0)."""
        self.context = (slot, round_, 0)

    def lora(self) -> tuple[str, int, str] | None:
        """``LoRARequest`` arguments of the served adapter (``None`` without LoRA)."""
        if self.spec.lora_config is None or self.active is None:
            return None
        lora_id, folder = self.adapters[self.active]
        return (f"agent_{self.active}_{lora_id}", lora_id, str(folder))

    def sampling_kwargs(
        self, settings: SamplingSettings, prompt_len: int, seed: int
    ) -> dict[str, Any]:
        """vLLM ``SamplingParams`` arguments equal to the HF sampler's settings for one prompt."""
        budget = max(1, min(settings.max_new_tokens, settings.max_model_len - prompt_len))
        config = self.spec.vllm_config
        kwargs: dict[str, Any] = {
            "max_tokens": budget,
            "logprobs": 0,
            "repetition_penalty": settings.repetition_penalty,
            "min_tokens": min(settings.min_new_tokens or 0, budget),
            "stop": list(settings.stop_strings or []) or None,
            "include_stop_str_in_output": True,
            "skip_special_tokens": True,
            "seed": seed,
        }
        if settings.greedy:
            kwargs.update(temperature=0.0)
        else:
            kwargs.update(
                temperature=settings.temperature,
                top_p=settings.top_p,
                top_k=settings.top_k if settings.top_k > 0 else -1,
                min_p=settings.min_p,
            )
        if config is not None:
            kwargs.update(
                presence_penalty=config.presence_penalty,
                frequency_penalty=config.frequency_penalty,
            )
        return kwargs

    def seed(self, index: int) -> int:
        """Sampling seed of the ``index``-th prompt of a call: drawn from torch's RNG, so the
        same run samples the same completions and a resumed run (RNG restored) samples
        what the uninterrupted one would."""
        del index
        return int(torch.randint(0, 2**31 - 1, ()).item())

    def generate(
        self, prompts: list[list[int]], params: list[dict[str, Any]]
    ) -> list[tuple[list[int], list[float]]]:
        """Token ids and sampler log-probs of one completion per prompt."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        lora = self.lora()
        llm = self.llm
        if self._asleep:
            llm.wake_up()
            self._asleep = False
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            [SamplingParams(**p) for p in params],
            lora_request=LoRARequest(*lora) if lora is not None else None,
            use_tqdm=False,
        )
        if self.sleeps:  # give the update the engine's memory back until the next rollout
            llm.sleep(level=1)
            self._asleep = True
        return [completion_of(output) for output in outputs]

    @property
    def sleeps(self) -> bool:
        """Whether the engine sleeps between rollouts (``vllm_config.sleep_mode``, CUDA only:
        level 1 moves the weights to host memory and drops the KV cache)."""
        config = self.spec.vllm_config
        return bool(config is not None and config.sleep_mode and torch.cuda.is_available())

    def __call__(
        self, model: Any, tokenizer: Any, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[Completion]:
        """One completion per prompt with the served adapter (``model`` is not used); a
        prompt that fills ``settings.max_model_len`` gets an empty one."""
        del model
        out = [Completion([], [], "") for _ in prompts]
        fits = [i for i, p in enumerate(prompts) if len(p) < settings.max_model_len]
        if not fits:
            return out
        params = [self.sampling_kwargs(settings, len(prompts[i]), self.seed(i)) for i in fits]
        answers = self.generate([prompts[i] for i in fits], params)
        for i, (ids, logps) in zip(fits, answers, strict=True):
            out[i] = Completion(ids, logps, tokenizer.decode(ids, skip_special_tokens=True))
        return out

    @classmethod
    def shared(cls, spec: Any) -> VLLMGenerator:
        """The process's generator for this model and engine settings (population members
        on one base model share one engine, serving one adapter each)."""
        key = (
            str(spec.pretrained_model_name_or_path),
            spec.max_model_len,
            spec.vllm_lora_export_dir,
            repr(spec.vllm_config),
            repr(sorted(spec.vllm_engine_args.items())),
        )
        if key not in _SHARED:
            _SHARED[key] = cls(spec, spec.vllm_lora_export_dir)
        return _SHARED[key]

    def close(self) -> None:
        """Stop the engine; remove the adapter folders it made."""
        self._llm = None
        for key in [k for k, v in _SHARED.items() if v is self]:
            del _SHARED[key]
        if self._owns_dir:
            shutil.rmtree(self.export_dir, ignore_errors=True)


_SHARED: dict[tuple, VLLMGenerator] = {}


def completion_of(output: Any) -> tuple[list[int], list[float]]:
    """Token ids and their sampler log-probs of a vLLM ``RequestOutput``'s first completion."""
    sampled = output.outputs[0]
    ids = list(sampled.token_ids)
    logps = [float(step[token].logprob) for token, step in zip(ids, sampled.logprobs, strict=True)]
    return ids, logps
