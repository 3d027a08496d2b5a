"""A tiny Llama-style causal LM and BPE tokenizer, built offline for tests and demos."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")


def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024):
    """Train a byte-level BPE tokenizer on ``texts`` with a ChatML chat template.

    Args:
        texts: Training corpus (held in memory).
        vocab_size: Target vocabulary size, special tokens included.

    Returns:
        A ``transformers.PreTrainedTokenizerFast``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_llm(
    out_dir: str | Path,
    *,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 8,
    intermediate_size: int = 512,
    vocab_size: int = 1024,
    max_position_embeddings: int = 512,
    seed: int = 0,
) -> Path:
    """Build and ``save_pretrained`` a tiny Llama causal LM and its tokenizer.

    The defaults give about 3M parameters. Nothing is downloaded.

    Args:
        out_dir: Folder to write (created).
        hidden_size: Model width.
        num_layers: Decoder layers.
        num_heads: Attention heads (key/value heads are half as many).
        intermediate_size: MLP width.
        vocab_size: Tokenizer vocabulary size.
        max_position_embeddings: Longest sequence the model accepts.
        seed: Seed of the weight initialisation.

    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from agilerl.llm.sample_data import corpus

    out_dir = Path(out_dir)
    tokenizer = build_tokenizer(corpus(), vocab_size=vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
