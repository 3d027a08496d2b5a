"""Training loops and the modules they call (evaluation, checkpointing, run context).

Loops are imported by the strategies on use: ``agilerl.training.train_on_policy``.
"""
