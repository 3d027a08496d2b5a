"""JSON schema of the manifest, for editor completion and external validators."""

from __future__ import annotations

from typing import Any

from agilerl.arena.models.env import ENV_SPECS
from agilerl.arena.models.hpo import MutationSpec, TournamentSelectionSpec
from agilerl.arena.models.manifest import API_VERSION
from agilerl.arena.models.networks import FinetuningNetworkSpec, NetworkSpec
from agilerl.arena.models.registry import MANIFEST_REGISTRY
from agilerl.arena.models.training import ReplayBufferSpec, TrainingSpec

SCHEMA_ID = "https://agilerl.dev/schema/manifest-v1.json"


def _inline(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    defs.update(schema.pop("$defs", {}))
    return schema


def manifest_schema() -> dict[str, Any]:
    """The manifest's JSON schema (draft 2020-12).

    ``algorithm`` is one schema per registered name (``name`` is a ``const``),
    ``environment`` one per ``env_type``.
    """
    defs: dict[str, Any] = {}
    algorithms = []
    for name, spec_cls in MANIFEST_REGISTRY.items():
        schema = _inline(spec_cls.model_json_schema(ref_template="#/$defs/{model}"), defs)
        schema["properties"] = {"name": {"const": name}, **schema.get("properties", {})}
        schema["required"] = ["name", *schema.get("required", [])]
        schema["title"] = name
        algorithms.append(schema)
    environments = []
    for env_type, env_cls in ENV_SPECS.items():
        schema = _inline(env_cls.model_json_schema(ref_template="#/$defs/{model}"), defs)
        schema["title"] = f"{env_type} environment"
        environments.append(schema)

    def section(model: Any) -> dict[str, Any]:
        return _inline(model.model_json_schema(ref_template="#/$defs/{model}"), defs)

    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "agilerl training manifest",
        "type": "object",
        "additionalProperties": False,
        "required": ["algorithm", "environment"],
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "algorithm": {"oneOf": algorithms},
            "environment": {"anyOf": environments},
            "network": {
                "anyOf": [section(NetworkSpec), section(FinetuningNetworkSpec), {"type": "null"}]
            },
            "training": section(TrainingSpec),
            "replay_buffer": {"anyOf": [section(ReplayBufferSpec), {"type": "null"}]},
            "mutation": {"anyOf": [section(MutationSpec), {"type": "null"}]},
            "tournament_selection": {"anyOf": [section(TournamentSelectionSpec), {"type": "null"}]},
        },
        "$defs": defs,
    }
