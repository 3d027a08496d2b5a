"""Log-prob helpers: position ids under left padding, head only on the completion."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.llm


def test_sequence_logprobs_match_a_full_log_softmax(make_env, tiny_model_dir) -> None:
    from agilerl.llm.model import load_causal_lm, sequence_logprobs

    env = make_env("preference")
    batch = env.collate(env.test.rows[:4])
    model = load_causal_lm(tiny_model_dir).eval()
    with torch.no_grad():
        logps, mask = sequence_logprobs(
            model, batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
        )
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    full = torch.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    expected = (full * batch["loss_mask"][:, 1:]).sum(-1)
    assert mask.shape[1] < batch["input_ids"].shape[1] - 1  # the prompt is skipped
    assert torch.allclose(logps.sum(-1), expected, atol=1e-5)
    assert torch.equal(mask.sum(-1), batch["loss_mask"][:, 1:].sum(-1).float())


def test_left_padding_with_position_ids_matches_unpadded(tokenizer, tiny_model_dir) -> None:
    from agilerl.llm.model import load_causal_lm, position_ids_from_mask

    model = load_causal_lm(tiny_model_dir).eval()
    ids = tokenizer("What colour is the apple?", add_special_tokens=False)["input_ids"]
    pad = tokenizer.pad_token_id
    padded = torch.tensor([[pad] * 3 + ids])
    mask = torch.tensor([[0] * 3 + [1] * len(ids)])
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([ids])).logits[0]
        left = model(
            input_ids=padded, attention_mask=mask, position_ids=position_ids_from_mask(mask)
        ).logits[0, 3:]
    assert torch.allclose(alone, left, atol=1e-5)


def _model_spec(name: str):
    from types import SimpleNamespace

    return SimpleNamespace(pretrained_model_name_or_path=name)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, r"is not a model folder \(no config.json\)"),
        ({"config.json": "{}", "pytorch_model.bin": ""}, "holds only pickle weights"),
        ({"config.json": "{}"}, "holds no weights"),
        (
            {"config.json": '{"auto_map": {"AutoModel": "x.Y"}}', "model.safetensors": ""},
            "needs the model's own code",
        ),
    ],
)
def test_a_model_folder_that_cannot_load_safely_is_refused_before_the_run(
    tmp_path, files: dict, message: str
) -> None:
    from agilerl.arena.models.errors import ConfigError
    from agilerl.strategies.llm import model_path

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=message):
        model_path(_model_spec(str(tmp_path)))


def test_a_hub_id_missing_from_the_cache_is_refused_offline(monkeypatch, tmp_path) -> None:
    from agilerl.arena.models.errors import ConfigError
    from agilerl.strategies.llm import model_path

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ConfigError, match="neither a local folder nor in the Hugging Face cache"):
        model_path(_model_spec("someone/some-model"))
