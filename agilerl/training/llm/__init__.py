"""LLM fine-tuning loops."""
