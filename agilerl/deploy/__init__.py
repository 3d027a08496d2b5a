"""Use a trained agent outside its run: load it to act, or export its policy.

* :func:`agilerl.deploy.trained_agent.load` (also ``agilerl.load``): the best
  agent of a run, with ``act(obs, deterministic=True)``.
* :mod:`agilerl.deploy.policy_graph`: the deterministic policy as one torch module.
* :mod:`agilerl.deploy.exporting`: that module written as ONNX or TorchScript
  (``agilerl export RUN``).

Nothing is imported here: torch loads with the submodule that needs it.
"""
