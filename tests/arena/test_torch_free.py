"""The contract imports and validates without torch, gymnasium or transformers."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import agilerl.arena.models as arena
import agilerl.models
from agilerl.arena.models.schema import manifest_schema
arena.TrainingManifest.from_dict({
    "algorithm": {"name": "PPO", "lr": 0.001},
    "environment": {"name": "CartPole-v1", "num_envs": 4},
    "network": {"arch": "mlp", "latent_dim": 32},
    "training": {"max_steps": 1000},
})
arena.TrainingManifest.from_dict({
    "algorithm": {"name": "GRPO", "group_size": 2},
    "environment": {"dataset": "d.jsonl", "rubric_file_path": "r.py",
                    "prompt_template": {"user_0": "q"}},
    "network": {"pretrained_model_name_or_path": "m", "max_context_length": 64},
})
manifest_schema()
heavy = ["torch", "gymnasium", "transformers", "peft", "hydra", "numpy"]
print(json.dumps([m for m in heavy if m in sys.modules]))
"""


def test_contract_is_torch_free() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
