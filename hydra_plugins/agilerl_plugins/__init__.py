"""Hydra plugins of agilerl: launchers that validate a whole sweep first, and an Optuna sweeper.

Hydra only loads plugins from the ``hydra_plugins`` namespace; the logic lives
in :mod:`agilerl.launch` and these classes are thin adapters.
"""
