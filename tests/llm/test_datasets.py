"""Dataset envs from local files: formats, column mapping, chat rows, truncation, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agilerl.arena.models.errors import ConfigError

pytestmark = pytest.mark.llm


def test_sft_env_splits_and_masks_the_response(make_env, tokenizer) -> None:
    env = make_env("sft")
    assert len(env.train.rows) == 270 and len(env.test.rows) == 30
    assert env.truncated == 0
    batch = env.collate(env.train.rows[:4])
    row, raw = env.train.rows[0], env.raw_train[0]
    masked = batch["input_ids"][0][batch["loss_mask"][0].bool()].tolist()
    assert masked == row.completions[0]
    # The assistant turn as the chat template renders it: answer, end of turn, newline.
    assert tokenizer.decode(masked) == raw["response"] + "<|im_end|>\n"
    prompt = tokenizer.decode(row.prompt_ids)
    assert prompt.startswith("<|im_start|>user\n" + raw["prompt"])
    assert prompt.endswith("<|im_start|>assistant\n")
    # The split is seeded.
    assert make_env("sft").raw_test == env.raw_test


def test_preference_env_puts_chosen_then_rejected(make_env, tokenizer) -> None:
    env = make_env("preference")
    rows = env.train.rows[:3]
    batch = env.collate(rows)
    assert batch["input_ids"].shape[0] == 6
    chosen = batch["input_ids"][1][batch["loss_mask"][1].bool()].tolist()
    rejected = batch["input_ids"][4][batch["loss_mask"][4].bool()].tolist()
    assert tokenizer.decode(chosen).startswith(env.raw_train[1]["chosen"])
    assert tokenizer.decode(rejected).startswith(env.raw_train[1]["rejected"])


@pytest.mark.parametrize("suffix", ["csv", "parquet", "json"])
def test_other_formats_and_column_mapping(tmp_path: Path, make_env, suffix: str) -> None:
    import datasets

    rows = [{"question": f"What is {i} plus 1?", "answer": f"{i + 1}."} for i in range(20)]
    data = datasets.Dataset.from_list(rows)
    path = tmp_path / f"rows.{suffix}"
    {"csv": data.to_csv, "parquet": data.to_parquet, "json": data.to_json}[suffix](str(path))
    env = make_env(
        "sft",
        dataset=str(path),
        columns={"question": "prompt", "answer": "response"},
        train_test_split=0.75,
    )
    assert len(env.train.rows) == 15 and len(env.test.rows) == 5
    assert {r["prompt"] for r in env.raw_train + env.raw_test} == {r["question"] for r in rows}


def test_chat_messages_rows(tmp_path: Path, make_env, tokenizer) -> None:
    path = tmp_path / "chat.jsonl"
    with path.open("w") as handle:
        for i in range(10):
            messages = [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": f"Count to {i}."},
                {"role": "assistant", "content": f"Up to {i}."},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    env = make_env("sft", dataset=str(path), train_test_split=0.5)
    row = env.train.rows[0]
    prompt = tokenizer.decode(row.prompt_ids)
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCount")
    assert tokenizer.decode(row.completions[0]).startswith("Up to ")


def test_truncation_is_counted(make_env) -> None:
    full = make_env("sft", max_model_len=128)
    env = make_env("sft", max_model_len=29)
    longest = max(
        len(r.prompt_ids) + len(r.completions[0]) for r in full.train.rows + full.test.rows
    )
    assert longest > 29
    expected = sum(
        len(r.prompt_ids) + len(r.completions[0]) > 29 for r in full.train.rows + full.test.rows
    )
    assert 0 < env.truncated == expected < 300
    assert all(len(r.prompt_ids) + len(r.completions[0]) <= 29 for r in env.train.rows)
    # Every prompt of the sample data is 22 tokens: nothing is left to learn from.
    with pytest.raises(ConfigError, match="max_context_length"):
        make_env("sft", max_model_len=22)


def test_missing_column_names_the_fix(tmp_path: Path, make_env) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps({"q": str(i), "a": str(i)}) for i in range(5)))
    with pytest.raises(ConfigError, match="columns"):
        make_env("sft", dataset=str(path))
    with pytest.raises(ConfigError, match="does not exist"):
        make_env("sft", dataset=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match=r"\.jsonl, \.json, \.csv or \.parquet"):
        make_env("sft", dataset=str(tmp_path / "rows.txt"))


def test_prompt_template_builds_the_turns(make_env, tokenizer) -> None:
    template = {"system_0": "Answer briefly.", "user_1": "Question: {prompt}"}
    env = make_env("sft", prompt_template=template)
    prompt = tokenizer.decode(env.train.rows[0].prompt_ids)
    assert prompt.startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n")
    assert "Question: " + env.raw_train[0]["prompt"] in prompt
    with pytest.raises(ConfigError, match="user_0"):
        make_env("sft", prompt_template={"user": "{prompt}"})
    with pytest.raises(ConfigError, match="no column 'question'"):
        make_env("sft", prompt_template={"user_0": "{question}"})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"prompt": "a"}\n{"prompt": b}\n', r"line 2 is not JSON"),
        (b"\xff\xfe\x00garbage\n", r"line 1 is not UTF-8 text"),
        (b"", r"holds no rows"),
        (b"\n\n", r"holds no rows"),
        (b"[1, 2]\n", r"line 1 is a list, not an object"),
        (b'{"prompt": "' + b"x" * (2 << 20) + b'"}\n', r"line 1 is longer than 1,048,576 bytes"),
    ],
)
def test_a_malformed_jsonl_file_names_the_line(tmp_path, content: bytes, message: str) -> None:
    from agilerl.llm.datasets import read_rows

    path = tmp_path / "rows.jsonl"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"environment.dataset: .*rows.jsonl.*{message}"):
        read_rows(path)


@pytest.mark.parametrize(("suffix", "content"), [(".parquet", b"PAR1 junk"), (".csv", b"")])
def test_a_corrupt_table_file_is_a_config_error(tmp_path, suffix: str, content: bytes) -> None:
    from agilerl.llm.datasets import read_rows

    path = tmp_path / f"rows{suffix}"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"environment.dataset: .*rows\{suffix}"):
        read_rows(path)
