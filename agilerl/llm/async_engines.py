"""Asynchronous rollouts: vLLM engines in processes of their own, generating ahead.

``training.rollout_mode: async`` starts ``rollout_engines_per_agent`` engine
processes (spawned; each holds a ``vllm.LLM``). While the trainer learns
from round ``k``, a background thread collects round ``k + 1`` through them
with the adapter version published before that update, so generation and
learning overlap and each sample is one or more updates stale (bounded by
``weight_sync_interval``; every sample carries the version that generated it).

What is generated does not depend on timing: a round's prompts are fixed by
the round number, every request's sampling seed is derived from the run's
seed, the member's slot, the round, the turn and the prompt's index
(:func:`request_seed`), and which version serves a round is decided on the
trainer's thread before the round starts. A resumed run therefore samples
what the uninterrupted one did (prefetched rounds travel in checkpoints).

An engine process that dies is restarted (``MAX_RESTARTS`` times per
engine, its adapters re-sent); past that, generation raises and the run
stops as failed after its last checkpoint. Engines ignore Ctrl-C (the
trainer stops them when it stops).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agilerl.arena.models.errors import RunFailure
from agilerl.llm.vllm_engine import CPU_ENVIRONMENT, VLLMGenerator, completion_of, engine_args

MAX_RESTARTS = 2
POLL_SECONDS = 0.5
START_TIMEOUT = 900.0
"""Seconds an engine may take to start (the CPU build can take minutes on a loaded machine)."""


def request_seed(seed: int, slot: int, round_: int, turn: int, index: int) -> int:
    """The sampling seed of one request: a function of where it sits in the run only."""
    sequence = np.random.SeedSequence([seed, slot, round_, turn, index])
    return int(sequence.generate_state(1)[0] & 0x7FFFFFFF)


def _serve(connection: Any, args: dict[str, Any], environment: dict[str, str]) -> None:
    """An engine process: start vLLM, answer generate requests until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer decides when engines stop
    os.environ.update(environment)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    llm = LLM(**args)
    connection.send(("ready", None))
    while True:
        try:
            kind, job = connection.recv()
        except (EOFError, OSError):  # the trainer is gone (killed): nothing left to serve
            return
        if kind == "stop":
            return
        prompts, params, lora = job
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts],
            [SamplingParams(**p) for p in params],
            lora_request=LoRARequest(*lora) if lora is not None else None,
            use_tqdm=False,
        )
        try:
            connection.send(("done", [completion_of(output) for output in outputs]))
        except (BrokenPipeError, OSError):
            return


@dataclass
class _Engine:
    process: Any
    connection: Any
    restarts: int = 0


class EngineDied(RunFailure):
    """An engine process died more often than :data:`MAX_RESTARTS` allows.

    The training engine checkpoints where the members stand, the run ends as
    ``failed`` and ``train.py`` exits 1; resuming continues exactly.
    """


class AsyncVLLMGenerator(VLLMGenerator):
    """:class:`VLLMGenerator` whose engines run in processes of their own.

    Args:
        spec: The agents' spec.
        engines: Engine processes (``rollout_engines_per_agent``).
        chunk: Prompts per request (``rollout_batch_size`` groups); a round's
            requests are spread over the engines.
        threads: OpenMP threads per engine on a CPU (``env_resource_ratio``);
            ``None`` leaves the default.
        export_dir: Where adapter versions are written (see :class:`VLLMGenerator`).
    """

    def __init__(
        self,
        spec: Any,
        *,
        engines: int = 1,
        chunk: int | None = None,
        threads: int | None = None,
        export_dir: str | Path | None = None,
    ) -> None:
        super().__init__(spec, export_dir)
        self.count, self.chunk, self.threads = engines, chunk, threads
        self._engines: list[_Engine] = []

    # --- processes -----------------------------------------------------------------------
    def _environment(self) -> dict[str, str]:
        environment = dict(CPU_ENVIRONMENT)
        if self.threads is not None:
            environment["OMP_NUM_THREADS"] = str(self.threads)
        return environment

    def _spawn(self) -> _Engine:
        import torch

        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        args = engine_args(
            self.spec, cuda=torch.cuda.is_available(), prefix_cache=self.reuse_prefix_cache
        )
        process = context.Process(
            target=_serve, args=(child, args, self._environment()), daemon=True
        )
        process.start()
        child.close()
        engine = _Engine(process, parent)
        self._answer(engine, START_TIMEOUT)
        return engine

    def _answer(self, engine: _Engine, timeout: float) -> Any:
        """The engine's next message; raises :class:`EngineDied` if it dies first."""
        deadline = time.monotonic() + timeout
        while not engine.connection.poll(POLL_SECONDS):
            if not engine.process.is_alive():
                raise EngineDied(f"rollout engine (pid {engine.process.pid}) died")
            if time.monotonic() > deadline:
                raise EngineDied(f"rollout engine (pid {engine.process.pid}) did not answer")
        try:
            return engine.connection.recv()[1]
        except (EOFError, OSError):
            raise EngineDied(f"rollout engine (pid {engine.process.pid}) died") from None

    @property
    def engines(self) -> list[_Engine]:
        """The engine processes, started at first use."""
        while len(self._engines) < self.count:
            self._engines.append(self._spawn())
        return self._engines

    @property
    def pids(self) -> list[int]:
        """Process ids of the running engines."""
        return [e.process.pid for e in self._engines]

    def _request(self, index: int, job: Any) -> list[tuple[list[int], list[float]]]:
        """Send one job to engine ``index``, restarting it if it died."""
        engine = self.engines[index]
        while True:
            try:
                engine.connection.send(("generate", job))
                return self._answer(engine, START_TIMEOUT)
            except (EngineDied, BrokenPipeError, OSError) as exc:
                if engine.restarts >= MAX_RESTARTS:
                    raise EngineDied(
                        f"{exc}; restarted {engine.restarts} times already: the run stops as "
                        "failed, checkpointed where it stands; resume=<run dir> continues it"
                    ) from None
                restarts = engine.restarts + 1
                engine.process.kill()
                engine = self._spawn()
                engine.restarts = restarts
                self._engines[index] = engine

    # --- generation -------------------------------------------------------------------------
    def seed(self, index: int) -> int:
        """The ``index``-th request's seed at :attr:`context` (see :func:`request_seed`)."""
        slot, round_, turn = self.context
        return request_seed(int(self.spec.seed), slot, round_, turn, index)

    def generate(
        self, prompts: list[list[int]], params: list[dict[str, Any]]
    ) -> list[tuple[list[int], list[float]]]:
        """Requests of ``chunk`` prompts, spread over the engines in turn."""
        size = self.chunk or max(1, -(-len(prompts) // self.count))
        lora = self.lora()
        answers: list[tuple[list[int], list[float]]] = []
        for n, start in enumerate(range(0, len(prompts), size)):
            job = (
                [list(p) for p in prompts[start : start + size]],
                params[start : start + size],
                lora,
            )
            answers.extend(self._request(n % self.count, job))
        slot, round_, turn = self.context
        self.context = (slot, round_, turn + 1)  # a multi-turn episode's next call
        return answers

    def close(self) -> None:
        """Stop the engine processes; remove the adapter folders."""
        for engine in self._engines:
            with contextlib.suppress(BrokenPipeError, OSError):
                engine.connection.send(("stop", None))
        for engine in self._engines:
            engine.process.join(timeout=30)
            if engine.process.is_alive():
                engine.process.kill()
        self._engines = []
        super().close()
