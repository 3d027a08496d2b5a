"""agilerl: train RL agents and fine-tune LLMs from one validated manifest.

The package root stays import-light: the contract (:mod:`agilerl.arena.models`)
must load without torch, so nothing heavy is imported here.
"""

__version__ = "0.1.0"
