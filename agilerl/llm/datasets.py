"""Dataset environments for teacher-forced fine-tuning (SFT rows and preference pairs).

Rows come from a local JSONL/JSON/CSV/Parquet file through ``datasets``,
are renamed by the env's column mapping, split into train and test, rendered
with the tokenizer's chat template and tokenised once. A sequence longer than
``max_model_len`` is cut at the end (the response side) and counted in
``truncated``; a row whose prompt alone fills the context is dropped and
counted too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agilerl.arena.models.errors import ConfigError, Problem
from agilerl.llm.packing import pack_rows

_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


@dataclass
class TokenisedRow:
    """One tokenised example: a prompt and one (SFT) or two (chosen, rejected) completions."""

    prompt_ids: list[int]
    completions: list[list[int]]


@dataclass
class DatasetSplit:
    """Tokenised rows of one split and how many were truncated or dropped."""

    rows: list[TokenisedRow]
    truncated: int = 0
    dropped: int = 0


@dataclass
class LLMDatasetEnv:
    """Train and test splits of a dataset env, ready to batch.

    Attributes:
        objective: ``"sft"`` or ``"preference"``.
        train: Training rows.
        test: Held-out rows.
        pad_token_id: Padding id used by :meth:`collate`.
        raw_test: The held-out rows before tokenisation (for generation checks).
    """

    objective: str
    train: DatasetSplit
    test: DatasetSplit
    pad_token_id: int
    raw_test: list[dict[str, Any]] = field(default_factory=list)
    raw_train: list[dict[str, Any]] = field(default_factory=list)

    @property
    def truncated(self) -> int:
        """Rows truncated (or dropped) to fit ``max_model_len``, both splits."""
        return self.train.truncated + self.test.truncated + self.train.dropped + self.test.dropped

    def data_report(self) -> dict[str, int]:
        """What was read and what was cut or left out to fit, for ``summary.json``."""
        return {
            "train_rows": len(self.train.rows),
            "test_rows": len(self.test.rows),
            "dropped_too_long": self.train.dropped + self.test.dropped,
            "truncated_to_fit": self.train.truncated + self.test.truncated,
        }

    def order(self, epoch: int, seed: int) -> list[int]:
        """The shuffled order of training rows in ``epoch`` (a pure function of seed, epoch)."""
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        return torch.randperm(len(self.train.rows), generator=gen).tolist()

    def collate(self, rows: list[TokenisedRow]) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids``, ``attention_mask`` and ``loss_mask``.

        Preference rows give ``2B`` sequences: the ``B`` chosen first, then the ``B`` rejected.
        """
        n = len(rows[0].completions)
        seqs = [(r.prompt_ids, r.completions[k]) for k in range(n) for r in rows]
        width = max(len(p) + len(c) for p, c in seqs)
        ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        loss = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, (prompt, completion) in enumerate(seqs):
            full = prompt + completion
            ids[i, : len(full)] = torch.tensor(full)
            attn[i, : len(full)] = 1
            loss[i, len(prompt) : len(full)] = 1
        return {"input_ids": ids, "attention_mask": attn, "loss_mask": loss}

    def collate_packed(self, rows: list[TokenisedRow]) -> dict[str, torch.Tensor]:
        """The sequences of :meth:`collate`, packed (:func:`~agilerl.llm.packing.pack_rows`).

        A preference row's chosen and rejected sequences share a packed row.
        """
        prompts = [r.prompt_ids for r in rows]
        return pack_rows(prompts, [r.completions for r in rows], self.pad_token_id)


MAX_ROW_BYTES = 1 << 20
"""Longest JSONL line (one row) read: a row past it is refused, naming its line."""
MAX_ROWS = 10_000_000
"""Most rows one dataset file may hold."""


def read_rows(path: str | Path, field_name: str = "environment.dataset") -> list[dict[str, Any]]:
    """Rows of a local JSONL/JSON/CSV/Parquet file.

    JSONL is read line by line here, each line at most :data:`MAX_ROW_BYTES` and a JSON
    object; the other formats go through ``datasets``. Every malformed file is a
    :class:`ConfigError` naming ``field_name``, the file and, for JSONL, the line.

    Raises:
        ConfigError: For a missing, empty, unreadable or malformed file.
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError([Problem(field_name, f"{path} is not .jsonl, .json, .csv or .parquet")])
    if not path.is_file():
        raise ConfigError([Problem(field_name, f"{path} does not exist; check the path")])
    if path.suffix.lower() == ".jsonl":
        rows = _read_jsonl(path, field_name)
    else:
        rows = _read_with_datasets(path, fmt, field_name)
    if not rows:
        raise ConfigError([Problem(field_name, f"{path} holds no rows")])
    return rows


def _read_jsonl(path: Path, field_name: str) -> list[dict[str, Any]]:
    import json

    rows = []
    with path.open("rb") as handle:
        for number, line in enumerate(iter(lambda: handle.readline(MAX_ROW_BYTES + 1), b""), 1):
            where = f"{path}, line {number}"
            if len(line) > MAX_ROW_BYTES and not line.endswith(b"\n"):
                raise ConfigError(
                    [Problem(field_name, f"{where} is longer than {MAX_ROW_BYTES:,} bytes "
                             "(rows are capped at 1 MiB); split or shorten it")]
                )  # fmt: skip
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError:
                raise ConfigError([Problem(field_name, f"{where} is not UTF-8 text")]) from None
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    [Problem(field_name, f"{where} is not JSON ({exc.msg} at column {exc.colno})")]
                ) from None
            if not isinstance(row, dict):
                raise ConfigError(
                    [Problem(field_name, f"{where} is a {type(row).__name__}, not an object")]
                )
            rows.append(row)
            if len(rows) > MAX_ROWS:
                raise ConfigError([Problem(field_name, f"{path} has over {MAX_ROWS:,} rows")])
    return rows


def _read_with_datasets(path: Path, fmt: str, field_name: str) -> list[dict[str, Any]]:
    import datasets
    from datasets import load_dataset

    datasets.disable_progress_bars()  # a bar per split of a local file is noise in a run
    datasets.logging.set_verbosity_error()
    try:
        data = load_dataset(fmt, data_files=str(path), split="train")
    except Exception as exc:  # datasets raises many kinds for a malformed file
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            [Problem(field_name, f"{path} cannot be read as {path.suffix[1:]}: {detail}")]
        ) from None
    return data.to_list()


def _rename(rows: list[dict[str, Any]], columns: dict[str, str] | None) -> list[dict[str, Any]]:
    if not columns:
        return rows
    return [{columns.get(k, k): v for k, v in row.items()} for row in rows]


def _turn_order(key: str) -> int:
    role, _, index = key.rpartition("_")
    if not role or not index.isdigit():
        raise ConfigError(
            [
                Problem(
                    f"environment.prompt_template.{key}", "keys are '<role>_<index>', e.g. user_0"
                )
            ]
        )
    return int(index)


def _messages(row: dict[str, Any], prompt_column: str, template: dict[str, str] | None) -> list:
    if template:
        turns = sorted(template.items(), key=lambda kv: _turn_order(kv[0]))
        try:
            return [
                {"role": key.rsplit("_", 1)[0], "content": text.format(**row)}
                for key, text in turns
            ]
        except KeyError as exc:
            raise ConfigError(
                [Problem("environment.prompt_template", f"no column {exc} in the dataset rows")]
            ) from None
    return [{"role": "user", "content": str(row[prompt_column])}]


def render_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The prompt text up to the assistant's turn (chat template, else plain text)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n".join(m["content"] for m in messages) + "\n"


def _completion_ids(
    tokenizer: Any, messages: list[dict[str, str]], prompt_text: str, text: str
) -> list[int]:
    """Tokens of the assistant turn as the chat template renders it (end-of-turn included).

    Without a chat template (or one that re-renders the prompt differently
    once an answer follows) the completion is the text plus the EOS token.
    """
    if getattr(tokenizer, "chat_template", None):
        turn = {"role": "assistant", "content": str(text)}
        full = tokenizer.apply_chat_template([*messages, turn], tokenize=False)
        if full.startswith(prompt_text) and len(full) > len(prompt_text):
            return tokenizer(full[len(prompt_text) :], add_special_tokens=False)["input_ids"]
    ids = tokenizer(str(text), add_special_tokens=False)["input_ids"]
    return [*ids, tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else ids


def _split_row(
    row: dict[str, Any], objective: str, spec: Any, where: str
) -> tuple[list[dict[str, str]], list[str]]:
    """(prompt messages, completion texts) of one renamed row."""
    if objective == "sft":
        if row.get("messages"):
            messages = list(row["messages"])
            if messages[-1].get("role") != "assistant":
                raise ConfigError([Problem(where, "the last chat message must be the assistant's")])
            return messages[:-1], [messages[-1]["content"]]
        needed = (spec.prompt_column, spec.response_column)
    else:
        needed = (spec.prompt_column, spec.chosen_column, spec.rejected_column)
    missing = [c for c in needed if c not in row]
    if missing:
        raise ConfigError(
            [
                Problem(
                    where,
                    f"row has no column {missing[0]!r} (columns: {sorted(row)}); "
                    "map it with environment.columns or set the *_column fields",
                )
            ]
        )
    messages = _messages(row, spec.prompt_column, spec.prompt_template)
    return messages, [str(row[c]) for c in needed[1:]]


def tokenise_rows(
    rows: list[dict[str, Any]],
    tokenizer: Any,
    *,
    objective: str,
    spec: Any,
    max_model_len: int,
) -> DatasetSplit:
    """Render and tokenise rows, truncating each sequence to ``max_model_len`` tokens."""
    split = DatasetSplit(rows=[])
    for i, row in enumerate(rows):
        messages, texts = _split_row(row, objective, spec, f"{spec.name}[row {i}]")
        prompt_text = render_prompt(tokenizer, messages)
        prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        if len(prompt_ids) >= max_model_len:
            split.dropped += 1
            continue
        room = max_model_len - len(prompt_ids)
        completions = [_completion_ids(tokenizer, messages, prompt_text, t) for t in texts]
        if any(len(c) > room for c in completions):
            split.truncated += 1
            completions = [c[:room] for c in completions]
        split.rows.append(TokenisedRow(prompt_ids=prompt_ids, completions=completions))
    return split


def load_dataset_env(
    env_spec: Any,
    tokenizer: Any,
    *,
    max_model_len: int,
    seed: int = 42,
    base_dir: str | Path | None = None,
) -> LLMDatasetEnv:
    """Build the dataset env an ``LLMEnvSpec`` (``env_type: dataset``) describes.

    Args:
        env_spec: The validated env spec.
        tokenizer: Tokenizer with a chat template (plain text is used without one).
        max_model_len: Longest sequence kept (prompt plus completion).
        seed: Seed of the train/test split.
        base_dir: Folder relative dataset paths are resolved against (default: cwd).

    Raises:
        ConfigError: For a hub dataset (needs network access), a missing file,
            missing columns, or a split that leaves either side empty.
    """
    if env_spec.hf_dataset_id:
        raise ConfigError(
            [
                Problem(
                    "environment.hf_dataset_id",
                    "hub datasets need network access; download it and set environment.dataset",
                )
            ]
        )
    field_name = "environment.dataset" if env_spec.dataset else "environment.dataset_path"
    path = Path(env_spec.dataset or env_spec.dataset_path)
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    rows = _rename(read_rows(path, field_name), env_spec.columns)
    objective = env_spec.objective
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(rows), generator=gen).tolist()
    n_train = round(len(rows) * env_spec.train_test_split)
    if n_train == 0 or n_train == len(rows):
        raise ConfigError(
            [
                Problem(
                    "environment.train_test_split",
                    f"{env_spec.train_test_split} of {len(rows)} rows leaves a split empty",
                )
            ]
        )
    raw_train = [rows[i] for i in perm[:n_train]]
    raw_test = [rows[i] for i in perm[n_train:]]
    kwargs = {"objective": objective, "spec": env_spec, "max_model_len": max_model_len}
    env = LLMDatasetEnv(
        objective=objective,
        train=tokenise_rows(raw_train, tokenizer, **kwargs),
        test=tokenise_rows(raw_test, tokenizer, **kwargs),
        pad_token_id=tokenizer.pad_token_id,
        raw_test=raw_test,
        raw_train=raw_train,
    )
    if not env.train.rows:
        raise ConfigError(
            [Problem("network.max_context_length", "every training row's prompt is too long")]
        )
    return env
