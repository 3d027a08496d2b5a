"""The exported JSON schema describes the manifest."""

from __future__ import annotations

import json

from agilerl.arena.models import MANIFEST_REGISTRY
from agilerl.arena.models.schema import SCHEMA_ID, manifest_schema


def test_schema_has_every_algorithm_and_section() -> None:
    schema = manifest_schema()
    json.dumps(schema)  # serialisable
    assert schema["$id"] == SCHEMA_ID
    assert schema["additionalProperties"] is False
    names = [s["properties"]["name"]["const"] for s in schema["properties"]["algorithm"]["oneOf"]]
    assert names == MANIFEST_REGISTRY.names()
    ppo = next(s for s in schema["properties"]["algorithm"]["oneOf"] if s["title"] == "PPO")
    assert ppo["additionalProperties"] is False
    assert ppo["properties"]["clip_coef"]["maximum"] == 1
    assert ppo["properties"]["clip_coef"]["description"]
    for section in ("environment", "network", "training", "replay_buffer", "mutation"):
        assert section in schema["properties"]
    for ref in json.dumps(schema).split('"$ref": "')[1:]:
        assert ref.split('"')[0].removeprefix("#/$defs/") in schema["$defs"]
