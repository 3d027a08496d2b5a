"""Write the sample LLM datasets in data/ (SFT prompt/response and DPO preference pairs).

Usage::

    python scripts/make_llm_data.py [--out data]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agilerl.llm.sample_data import preference_rows, sft_rows, write_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data", help="Output folder.")
    args = parser.parse_args()
    out = Path(args.out)
    print(write_jsonl(sft_rows(300), out / "sft.jsonl"))
    print(write_jsonl(preference_rows(300), out / "preference.jsonl"))


if __name__ == "__main__":
    main()
