"""LLM fine-tuning helpers: model loading with LoRA, dataset envs, the tiny test model.

Everything here needs the ``llm`` extra (``pip install 'agilerl[llm]'``).
"""
