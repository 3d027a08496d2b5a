"""Write the countdown, arithmetic and digit prompt datasets for rollout fine-tuning in data/.

Usage::

    python scripts/make_countdown_data.py [--out data] [--rows 200]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agilerl.llm.sample_data import arithmetic_rows, countdown_rows, digit_rows, write_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data", help="Output folder.")
    parser.add_argument("--rows", type=int, default=200, help="Rows per dataset.")
    args = parser.parse_args()
    out = Path(args.out)
    print(write_jsonl(countdown_rows(args.rows), out / "countdown.jsonl"))
    print(write_jsonl(arithmetic_rows(args.rows), out / "arithmetic.jsonl"))
    print(write_jsonl(digit_rows(), out / "digits.jsonl"))


if __name__ == "__main__":
    main()
