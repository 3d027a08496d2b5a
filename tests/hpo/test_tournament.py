"""Tournament selection: elitism, fresh indices, independent clones, lineage, state."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from gymnasium import spaces

from agilerl.algorithms import DQN, PPO
from agilerl.arena.models.algorithms.dqn import DQNSpec
from agilerl.arena.models.algorithms.ppo import PPOSpec
from agilerl.hpo import TournamentSelection, windowed_fitness

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
NET = {
    "latent_dim": 8,
    "encoder_config": {"hidden_size": [8], "layer_norm": False},
    "head_config": {"hidden_size": [8], "layer_norm": False},
}


@pytest.fixture(autouse=True)
def _seed() -> Iterator[None]:
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _population(fitness: list[list[float]], cls: type = DQN) -> list:
    pop = []
    for i, values in enumerate(fitness):
        if cls is PPO:
            agent = PPO(PPOSpec(), OBS, spaces.Discrete(2), index=i, net_config=NET, learn_step=16)
        else:
            agent = DQN(DQNSpec(), OBS, spaces.Discrete(2), index=i, net_config=NET)
        agent.fitness = list(values)
        pop.append(agent)
    return pop


def test_windowed_fitness() -> None:
    agent = _population([[1.0, 5.0, 3.0]])[0]
    assert windowed_fitness(agent, 1) == 3.0
    assert windowed_fitness(agent, 2) == 4.0
    assert windowed_fitness(agent, 10) == 3.0
    agent.fitness = []
    assert windowed_fitness(agent, 1) == -np.inf
    agent.fitness = [float("nan")]
    assert windowed_fitness(agent, 1) == -np.inf


def test_elitism_keeps_best_by_windowed_mean() -> None:
    # last value favours agent 0, the 2-window mean favours agent 1
    pop = _population([[0.0, 10.0], [9.0, 8.0], [1.0, 1.0]])
    sel = TournamentSelection(2, True, 3, fitness_window=2, rng=np.random.default_rng(0))
    elite, new_pop, lineage = sel.select(pop)
    assert elite.index == 1 and new_pop[0].index == 1
    assert elite is not new_pop[0] and elite is not pop[1] and new_pop[0] is not pop[1]
    assert lineage[0] == {"index": 1, "parent": 1, "elite": True}
    assert len(new_pop) == 3 and len(lineage) == 3
    sel1 = TournamentSelection(2, True, 3, fitness_window=1, rng=np.random.default_rng(0))
    assert sel1.select(pop)[0].index == 0


def test_indices_fresh_and_increasing_across_generations() -> None:
    pop = _population([[1.0], [2.0], [3.0], [4.0]])
    pop[2].index = 7
    sel = TournamentSelection(2, True, 4, rng=np.random.default_rng(1))
    _, new_pop, lineage = sel.select(pop)
    assert [a.index for a in new_pop][1:] == [8, 9, 10]
    assert [entry["index"] for entry in lineage] == [a.index for a in new_pop]
    for agent in new_pop:
        agent.fitness.append(float(agent.index))
    _, newer, _ = sel.select(new_pop)
    assert [a.index for a in newer][1:] == [11, 12, 13]
    assert newer[0].index == 10  # the best (highest fitness) keeps its index


def test_without_elitism_all_members_are_winners() -> None:
    pop = _population([[1.0], [2.0], [3.0]])
    sel = TournamentSelection(3, False, 5, rng=np.random.default_rng(2))
    elite, new_pop, lineage = sel.select(pop)
    assert elite.index == 2
    assert len(new_pop) == 5 and not any(entry["elite"] for entry in lineage)
    assert [a.index for a in new_pop] == [3, 4, 5, 6, 7]
    parents = {a.index: a for a in pop}
    for agent, entry in zip(new_pop, lineage, strict=True):
        assert entry["index"] == agent.index
        assert entry["parent"] in parents
        assert agent.fitness == parents[entry["parent"]].fitness


def test_lineage_parents_match_cloned_weights() -> None:
    pop = _population([[1.0], [2.0], [3.0]])
    sel = TournamentSelection(2, True, 6, rng=np.random.default_rng(3))
    _, new_pop, lineage = sel.select(pop)
    by_index = {a.index: a for a in pop}
    for agent, entry in zip(new_pop, lineage, strict=True):
        parent = by_index[entry["parent"]]
        for key, value in parent.actor.state_dict().items():
            assert torch.equal(agent.actor.state_dict()[key], value)


def test_clones_are_independent_of_parents() -> None:
    pop = _population([[1.0], [5.0]], cls=PPO)
    sel = TournamentSelection(2, True, 3, rng=np.random.default_rng(4))
    elite, new_pop, _ = sel.select(pop)
    before = {k: v.clone() for k, v in pop[1].actor.state_dict().items()}
    for agent in (elite, *new_pop):
        with torch.no_grad():
            for p in agent.actor.parameters():
                p.add_(1.0)
        agent.fitness.append(-1.0)
        agent.lr = 0.5
    for key, value in pop[1].actor.state_dict().items():
        assert torch.equal(before[key], value)
    assert pop[1].fitness == [5.0] and pop[1].lr != 0.5


def test_winners_follow_fitness() -> None:
    fitness = [[0.0], [1.0], [2.0], [3.0]]
    pop = _population(fitness)
    sel = TournamentSelection(2, False, 2, rng=np.random.default_rng(5))
    scores = np.array([0.0, 1.0, 2.0, 3.0])
    counts: Counter[int] = Counter(sel._tournament(scores) for _ in range(4000))
    # with replacement, P(winner = rank r of n) = ((r+1)^2 - r^2) / n^2 -> 1, 3, 5, 7 / 16
    for rank, expected in enumerate((1 / 16, 3 / 16, 5 / 16, 7 / 16)):
        assert abs(counts[rank] / 4000 - expected) < 0.03
    # and through select(): the worst agent is chosen far less often than the best
    parents: Counter[int] = Counter()
    for _ in range(30):
        _, _, lineage = sel.select(pop)
        parents.update(entry["parent"] for entry in lineage)
    assert parents[3] > parents[0]


def test_tournament_size_one_is_uniform_and_large_size_picks_best() -> None:
    scores = np.array([0.0, 1.0, 2.0])
    sel = TournamentSelection(1, False, 1, rng=np.random.default_rng(6))
    counts = Counter(sel._tournament(scores) for _ in range(3000))
    assert all(abs(counts[i] / 3000 - 1 / 3) < 0.04 for i in range(3))
    big = TournamentSelection(64, False, 1, rng=np.random.default_rng(7))
    assert all(big._tournament(scores) == 2 for _ in range(50))


def test_agents_without_fitness_rank_last() -> None:
    pop = _population([[], [-100.0], []])
    sel = TournamentSelection(2, True, 3, rng=np.random.default_rng(8))
    elite, _, _ = sel.select(pop)
    assert elite.index == 1


def test_state_dict_round_trip_gives_identical_selections() -> None:
    pop = _population([[1.0], [2.0], [0.5], [3.0]])
    sel = TournamentSelection(2, True, 4, rng=np.random.default_rng(9))
    sel.select(pop)
    buffer = io.BytesIO()
    torch.save(sel.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    other = TournamentSelection(2, True, 4, rng=np.random.default_rng(123))
    other.load_state_dict(state)
    for _ in range(3):
        a = sel.select(pop)[2]
        b = other.select(pop)[2]
        assert a == b


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="tournament_size"):
        TournamentSelection(0, True, 2)
    with pytest.raises(ValueError, match="population_size"):
        TournamentSelection(2, True, 0)
    with pytest.raises(ValueError, match="non-empty"):
        TournamentSelection(2, True, 2).select([])


# --- keep_incumbents: a member keeps its place unless a rival is strictly fitter ------------
def _weights_equal(a: DQN, b: DQN) -> bool:
    sa, sb = a.actor.state_dict(), b.actor.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def test_incumbents_all_keep_their_place_when_fitness_ties() -> None:
    pop = _population([[-500.0]] * 4)
    sel = TournamentSelection(2, True, 4, rng=np.random.default_rng(10), keep_incumbents=True)
    for _ in range(5):  # the classic rule would replace some of them by random picks
        _, new_pop, lineage = sel.select(pop)
        assert [a.index for a in new_pop] == [0, 1, 2, 3]
        assert [entry["parent"] for entry in lineage] == [0, 1, 2, 3]
        assert [entry["elite"] for entry in lineage] == [True, False, False, False]
        for agent, old in zip(new_pop[1:], pop[1:], strict=True):
            assert agent is not old and _weights_equal(agent, old)
    classic = TournamentSelection(2, True, 4, rng=np.random.default_rng(10))
    replaced = sum(
        entry["parent"] != slot
        for _ in range(5)
        for slot, entry in enumerate(classic.select(pop)[2])
    )
    assert replaced > 0


def test_incumbents_are_replaced_only_by_strictly_fitter_rivals() -> None:
    pop = _population([[0.0], [3.0], [1.0], [2.0]])
    fitness = {a.index: a.fitness[-1] for a in pop}
    sel = TournamentSelection(2, True, 4, rng=np.random.default_rng(11), keep_incumbents=True)
    replaced: Counter[int] = Counter()
    for _ in range(200):
        _, new_pop, lineage = sel.select(pop)
        assert new_pop[0].index == 1 and lineage[0]["elite"]
        # the places after the elite belong to the old members 0, 2, 3, in order
        for incumbent, entry in zip((0, 2, 3), lineage[1:], strict=True):
            assert fitness[entry["parent"]] >= fitness[incumbent]
            if entry["parent"] != incumbent:
                assert entry["index"] >= 4  # a winner's clone gets a fresh index
                replaced[incumbent] += 1
            else:
                assert entry["index"] == incumbent
    # one rival drawn from the other three: member 0 loses to all, member 2 to 2, member 3 to 1
    for incumbent, share in ((0, 1.0), (2, 2 / 3), (3, 1 / 3)):
        assert abs(replaced[incumbent] / 200 - share) < 0.1


def test_incumbents_lose_to_the_best_in_a_large_tournament_and_never_in_size_one() -> None:
    pop = _population([[0.0], [3.0], [1.0], [2.0]])
    big = TournamentSelection(64, True, 4, rng=np.random.default_rng(12), keep_incumbents=True)
    _, _, lineage = big.select(pop)
    assert [entry["parent"] for entry in lineage] == [1, 1, 1, 1]
    alone = TournamentSelection(1, False, 4, rng=np.random.default_rng(13), keep_incumbents=True)
    _, new_pop, lineage = alone.select(pop)
    assert [a.index for a in new_pop] == [0, 1, 2, 3]
    assert all(entry["parent"] == entry["index"] for entry in lineage)


def test_incumbent_selection_is_deterministic_for_a_seed() -> None:
    pop = _population([[0.0], [3.0], [1.0], [2.0], [2.5], [0.5]])

    def run(seed: int) -> list[list[dict]]:
        sel = TournamentSelection(2, True, 6, rng=np.random.default_rng(seed), keep_incumbents=True)
        return [sel.select(pop)[2] for _ in range(4)]

    assert run(14) == run(14)
    assert run(14) != run(15)
