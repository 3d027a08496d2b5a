"""Build the tiny offline causal LM used by tests and the LLM demos.

Usage::

    python scripts/make_tiny_llm.py [--out models/tiny-causal-lm]

``conf/network/llm_lora.yaml`` points at ``models/tiny-causal-lm``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agilerl.llm.tiny import build_tiny_llm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/tiny-causal-lm", help="Output folder.")
    parser.add_argument("--seed", type=int, default=0, help="Weight initialisation seed.")
    args = parser.parse_args()
    path = build_tiny_llm(args.out, seed=args.seed)
    from transformers import AutoModelForCausalLM

    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())
    print(f"wrote {path} ({params / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    main()
