"""GEM's multi-turn envs (``environment.name: gem:<family>:<id>``) as rollout envs.

Real GEM envs and the real tiny model throughout. Where a test needs the game to go
past turn 1 (the untrained model never writes ``\\boxed{n}``), the assistant's turns
come from a scripted player that plays Guess The Number by binary search; its turns
go through the same rollout code (:func:`agilerl.llm.rollout.collect`) as the model's.
"""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("gem")

from agilerl.arena.models.env import LLMEnvSpec
from agilerl.arena.models.errors import ConfigError
from agilerl.builders.llm import LLMBuilder
from agilerl.llm.generation import Completion
from agilerl.llm.rollout import collate, collect
from agilerl.llm.rollout_env import load_rollout_env

pytestmark = pytest.mark.llm

GUESS = "gem:game:GuessTheNumber-v0-easy"
HINT = re.compile(r"you guessed (\d+), and the target number is (higher|lower)")


def _gem_env(tokenizer: Any, name: str = GUESS, max_model_len: int = 512, **fields: Any) -> Any:
    spec = LLMEnvSpec(env_type="rollout", name=name, **fields)
    return load_rollout_env(spec, tokenizer, max_model_len=max_model_len)


def binary_search_player(
    model: Any, tokenizer: Any, prompts: list[list[int]], settings: Any
) -> list[Completion]:
    """Guess The Number (1..10) by binary search on the hints in each conversation so far."""
    del model, settings
    out = []
    for ids in prompts:
        low, high = 1, 10
        for guess, hint in HINT.findall(tokenizer.decode(ids)):
            if hint == "higher":
                low = max(low, int(guess) + 1)
            else:
                high = min(high, int(guess) - 1)
        text = f"I guess \\boxed{{{(low + high) // 2}}}"
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append(Completion(ids=tokens, logps=[0.0] * len(tokens), text=text))
    return out


def _play(env: Any, seed: int) -> tuple[list[str], list[float]]:
    """One episode by binary search, straight on the episode API: (user turns, rewards)."""
    episode = env.make_episode({"seed": seed})
    turns = [episode.first_messages()[0]["content"]]
    rewards, low, high = [], 1, 10
    for _ in range(env.max_turns):
        guess = (low + high) // 2
        observation, reward, done = episode.step(f"\\boxed{{{guess}}}")
        rewards.append(reward)
        if done:
            break
        turns.append(observation)
        low, high = (guess + 1, high) if "higher" in observation else (low, guess - 1)
    return turns, rewards


def _generated_runs(mask: list[int]) -> int:
    return sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))


# --- the spec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [GUESS, "gem:game:Sudoku-v0-easy", "gem:game:Mastermind-v0-easy", "gem:rg:arc_1d"],
)
def test_gem_names_validate_without_trust_or_reward(name: str) -> None:
    spec = LLMEnvSpec(env_type="rollout", name=name)
    assert spec.name == name and spec.env_name == name
    from agilerl.arena.models.trust import code_fields

    assert code_fields(spec) == []  # a registry name: no trust_code needed
    assert LLMEnvSpec.model_validate(spec.model_dump()).env_name == name  # round trip


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"name": "GuessTheNumber-v0"}, r"environment.name=.*gem:<family>:<id>"),
        ({"name": "gem:code:Taco8k"}, r"environment.name=.*executing it"),
        ({"name": "gem:math:GSM8K"}, r"environment.name=.*executing it"),
        ({"name": "gem:rg:countdown"}, r"environment.name=.*executing it"),
        ({"name": "gem:eval:CodeContest"}, r"environment.name=.*executing it"),
        ({"name": GUESS, "reward": "numeric"}, r"remove environment.reward"),
        ({"name": GUESS, "entrypoint": "a.b:c"}, r"exactly one source"),
        ({"name": GUESS, "dataset": "data/digits.jsonl"}, r"exactly one source"),
    ],
)
def test_bad_gem_manifests_are_refused(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LLMEnvSpec(env_type="rollout", **fields)


# --- the env ---------------------------------------------------------------------------------


def test_turns_rewards_and_limits(left_tokenizer) -> None:
    env = _gem_env(left_tokenizer)
    assert env.max_turns == 4 and env.max_reward == 1.0  # the easy game's own limit
    assert len(env.train) == 10_000 and len(env.test) == 16
    assert not {r["seed"] for r in env.train} & {r["seed"] for r in env.test}
    turns, rewards = _play(env, 3)
    assert "You are playing Guess The Number" in turns[0]
    assert all(t.endswith("Enter your next guess.") for t in turns[1:])  # GEM's suffix
    assert rewards[-1] == 1.0 and rewards[:-1] == [0.0] * (len(rewards) - 1)
    episode = env.make_episode({"seed": 3})
    episode.first_messages()
    assert episode.step("no answer here") == (None, -0.1, True)  # a format error ends it

    capped = _gem_env(left_tokenizer, max_turns=2)
    assert capped.max_turns == 2
    assert "within 2 turns" in capped.make_episode({"seed": 0}).first_messages()[0]["content"]
    assert _gem_env(left_tokenizer, "gem:game:Mastermind-v0-easy").max_turns == 10
    assert _gem_env(left_tokenizer, "gem:rg:arc_1d", max_model_len=1024).max_turns == 1


def test_unknown_ids_and_long_prompts_name_the_field(left_tokenizer) -> None:
    with pytest.raises(ConfigError, match=r"environment.name.*no env 'game:Nope-v0'.*game:"):
        _gem_env(left_tokenizer, "gem:game:Nope-v0")
    with pytest.raises(ConfigError, match=r"network.max_context_length.*first message"):
        _gem_env(left_tokenizer, max_model_len=64)


def test_a_missing_gem_extra_names_the_install(left_tokenizer, monkeypatch) -> None:
    """The one error path that needs gem absent: its import is made to fail."""
    monkeypatch.setitem(sys.modules, "gem", None)  # ``import gem`` raises ImportError
    match = (
        r"environment.name: 'gem:game:Guess.*' needs the gem extra: pip install 'agilerl\[gem\]'"
    )
    with pytest.raises(ConfigError, match=match):
        _gem_env(left_tokenizer)


def test_the_same_seed_plays_the_same_episode(left_tokenizer) -> None:
    a, b = _gem_env(left_tokenizer), _gem_env(left_tokenizer)
    games = {seed: _play(a, seed) for seed in range(8)}
    assert all(_play(b, seed) == games[seed] for seed in games)  # another env, same games
    assert len({len(turns) for turns, _ in games.values()}) > 1  # seeds set the target
    for name in ("gem:game:Sudoku-v0-easy", "gem:game:Mastermind-v0-easy"):
        first = [_gem_env(left_tokenizer, name, max_model_len=1024) for _ in range(2)]
        boards = [[e.make_episode({"seed": s}).first_messages() for s in (0, 1)] for e in first]
        assert boards[0] == boards[1]
        if name.endswith("Sudoku-v0-easy"):
            assert boards[0][0] != boards[0][1]


def test_a_reasoning_gym_task_is_one_scored_turn(left_tokenizer) -> None:
    """``rg:`` tasks: one turn, the boxed answer scored; train and held-out problems come
    from datasets of different seeds, and a seed always draws the same problem."""
    env = _gem_env(left_tokenizer, "gem:rg:basic_arithmetic")
    assert env.max_turns == 1
    train = [env.make_episode(r).first_messages() for r in env.train[:16]]
    assert train == [env.make_episode(r).first_messages() for r in env.train[:16]]
    held_out = [env.make_episode(r).first_messages() for r in env.test]
    assert len({m[0]["content"] for m in train}) > 8
    assert len({m[0]["content"] for m in held_out} - {m[0]["content"] for m in train}) > 8
    episode = env.make_episode(env.train[0])
    episode.first_messages()
    answer = episode._env.data["answer"]  # the problem the seed drew
    assert episode.step(f"so \\boxed{{{answer}}}") == (None, 1.0, True)
    episode = env.make_episode(env.train[0])
    episode.first_messages()
    assert episode.step("\\boxed{not a number}") == (None, 0.0, True)


def test_episodes_keep_their_own_random_streams(left_tokenizer) -> None:
    """GEM reseeds the global generators on reset; episodes leave them alone and
    interleaving episodes (one batched turn at a time) changes no game."""
    env = _gem_env(left_tokenizer, "gem:game:Mastermind-v0-easy", max_model_len=1024)
    random.seed(123)
    np.random.seed(123)
    before = (random.random(), float(np.random.random()))
    random.seed(123)
    np.random.seed(123)
    one, two = env.make_episode({"seed": 1}), env.make_episode({"seed": 2})
    interleaved = [one.first_messages(), two.first_messages()]
    interleaved += [one.step("\\boxed{1 2}"), two.step("\\boxed{1 2}")]
    assert (random.random(), float(np.random.random())) == before
    alone = []
    for seed in (1, 2):
        episode = env.make_episode({"seed": seed})
        alone.append((episode.first_messages(), episode.step("\\boxed{1 2}")))
    assert interleaved == [alone[0][0], alone[1][0], alone[0][1], alone[1][1]]


# --- rollouts and the loss -------------------------------------------------------------------


def test_env_turns_are_masked_out_of_the_loss(make_rollout_spec, left_tokenizer) -> None:
    """A multi-turn GEM episode through the rollout code: the game's replies are user
    turns whose tokens get no gradient; every generated token does. (Two turns: the tiny
    tokenizer spends ~400 of the tiny model's 512 positions on the rules.)"""
    env = _gem_env(left_tokenizer, max_turns=2)
    spec = make_rollout_spec("GRPO", group_size=1, max_model_len=512, max_output_tokens=16)
    agent = LLMBuilder.build(spec, tokenizer=left_tokenizer)
    rows = [{"seed": s} for s in range(6)]
    samples = collect(
        agent.actor,
        left_tokenizer,
        env,
        rows,
        group_size=1,
        settings=agent.sampling(),
        generator=binary_search_player,
    )
    episodes = [_play(env, s) for s in range(6)]
    for sample, (_, rewards) in zip(samples, episodes, strict=True):
        assert _generated_runs(sample.action_mask) == len(rewards)  # one run per turn
        assert sample.reward == pytest.approx(sum(rewards))  # the episode's return
    multi = [s for s in samples if _generated_runs(s.action_mask) == 2]
    assert multi and any(0.0 < s.reward < 1.0 for s in multi)  # a near miss on the last turn

    agent.prepare_rollout(samples)  # the model's own log-probs as the ratio's reference
    for sample in samples:
        sample.advantage = 1.0
    captured: dict[str, torch.Tensor] = {}
    forward = agent._forward_rows

    def keep_logps(rows: Any, **kwargs: Any) -> Any:
        logps, states = forward(rows, **kwargs)
        logps.retain_grad()
        captured["logps"] = logps
        return logps, states

    agent._forward_rows = keep_logps
    norm = float(sum(s.num_actions for s in samples))
    loss, _ = agent.loss(samples, env, {}, norm)
    loss.backward()
    grad = captured["logps"].grad
    batch = collate(samples, left_tokenizer.pad_token_id)
    mask = batch["action_mask"][:, -grad.shape[1] :]
    assert torch.all(grad[mask == 0] == 0)
    assert torch.all(grad[mask == 1] != 0)
    # the zero-gradient tokens between two turns are the game's reply
    sample = multi[0]
    first = sample.action_mask.index(1)
    between = [
        t for t, m in zip(sample.ids[first:], sample.action_mask[first:], strict=True) if not m
    ]
    assert "the target number is" in left_tokenizer.decode(between)


def test_grpo_on_a_gem_game_runs_and_writes_scores(
    compose, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The preset on the tiny model, without trust_code: rounds, held-out scores, samples."""
    from agilerl.launch.compose import build_manifest
    from agilerl.trainer import LocalTrainer

    manifest, _ = build_manifest(
        compose(
            "experiment=grpo_gem_guess_number",
            f"network.pretrained_model_name_or_path={tiny_model_dir}",
            "training.max_steps=2",
            "training.evaluation_interval=2",
        )
    )
    assert manifest.environment.name == GUESS and manifest.environment.max_turns == 4
    run = tmp_path / "run"
    LocalTrainer.from_manifest(manifest, run_dir=run, verbose=False).train()
    rounds = list(csv.DictReader((run / "rewards.csv").open()))
    assert [int(r["step"]) for r in rounds] == [1, 2]
    # a return is a sum of GEM turn rewards: a format error -0.1, a win 1, a miss up to 1
    assert all(-0.1 - 1e-6 <= float(r["reward"]) <= 1.0 for r in rounds)
    scores = list(csv.DictReader((run / "metrics.csv").open()))
    assert len(scores) == 1 and {"mean_reward", "pass_rate"} <= set(scores[0])
    shown = [json.loads(x) for x in (run / "samples" / "step_000002_agent_0.jsonl").open()]
    assert [s["row"]["seed"] for s in shown] == [1_000_000 + i for i in range(len(shown))]
    assert all(-0.1 - 1e-6 <= s["reward"] <= 1.0 for s in shown)
    written = (run / "manifest.yaml").read_text()
    assert GUESS in written
