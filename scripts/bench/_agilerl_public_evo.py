"""One evolutionary run of the public ``agilerl`` package (run by evo_vs_optuna.py in its venv).

    .bench_venvs/agilerl_public/bin/python _agilerl_public_evo.py JOB.json

Reads the job written by evo_vs_optuna.py (starting points, ranges, budget) and
prints one JSON line: env steps and wall seconds to the first evaluation >= the
target. Its ``train_off_policy`` runs unchanged except for the stop rule: the
package stops when every member's mean over its last 10 evaluations passes the
target; here the run stops at the first evaluation of any member that does, as
ours does, and the generation is recorded.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from agilerl.algorithms.core.registry import HyperparameterConfig, RLParameter
from agilerl.population import Population

from agilerl.algorithms import DQN
from agilerl.components.replay_buffer import ReplayBuffer
from agilerl.hpo.mutation import Mutations
from agilerl.hpo.tournament import TournamentSelection
from agilerl.training.train_off_policy import train_off_policy


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    seed = job["seed"]
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = gym.vector.SyncVectorEnv([lambda: gym.make(job["env"])])
    env.reset(seed=seed)
    ranges = job["ranges"]
    ints = {"batch_size", "learn_step"}
    hp_config = HyperparameterConfig(
        **{
            name: RLParameter(
                min=low,
                max=high,
                grow_factor=grow,
                shrink_factor=shrink,
                dtype=int if name in ints else float,
            )
            for name, (low, high, grow, shrink) in ranges.items()
        }
    )
    net = job["net"]
    population = []
    for index, start in enumerate(job["starts"]):
        mlp = {"min_mlp_nodes": net["min_mlp"], "max_mlp_nodes": net["max_mlp"]}
        net_config = {
            "latent_dim": net["latent_dim"],
            "min_latent_dim": net["min_latent_dim"],
            "max_latent_dim": net["max_latent_dim"],
            "encoder_config": {"hidden_size": [start["width"]], **mlp},
            "head_config": {"hidden_size": [start["width"]], **mlp},
        }
        torch.manual_seed(seed * 1000 + index)
        population.append(
            DQN(
                env.single_observation_space,
                env.single_action_space,
                index=index,
                hp_config=hp_config,
                net_config=net_config,
                batch_size=int(start["batch_size"]),
                lr=float(start["lr"]),
                learn_step=int(start["learn_step"]),
                gamma=float(start["gamma"]),
                tau=0.005,
                double=True,
            )
        )
    p = job["mutation"]
    mutations = Mutations(
        no_mutation=p["no_mut"],
        architecture=p["arch_mut"],
        new_layer_prob=p["new_layer"],
        parameters=p["params_mut"],
        activation=p["act_mut"],
        rl_hp=p["rl_hp_mut"],
        mutation_sd=0.1,
        rand_seed=seed,
    )
    tournament = TournamentSelection(2, True, job["pop"])
    memory = ReplayBuffer(max_size=job["buffer"])

    target = job["target"]
    state = {"generations": 0, "solved_at": None, "best": -np.inf}

    def first_member_at_target(self: Population, _target: float | None) -> bool:
        state["generations"] += 1
        latest = [float(np.mean(agent.fitness[-1])) for agent in self.agents if agent.fitness]
        state["best"] = max([state["best"], *latest])
        if state["solved_at"] is None and any(f >= target for f in latest):
            state["solved_at"] = state["generations"] * job["evo_steps"] * len(self.agents)
            return True
        return False

    Population.should_stop = first_member_at_target
    training = job["training"]
    began = time.perf_counter()
    train_off_policy(
        env,
        job["env"],
        "DQN",
        population,
        memory,
        max_steps=job["budget"] // job["pop"],
        evo_steps=job["evo_steps"],
        eval_loop=training["eval_loop"],
        learning_delay=training["learning_delay"],
        eps_start=float(training["eps_start"]),
        eps_end=float(training["eps_end"]),
        eps_decay=float(training["eps_decay"]),
        target=target,
        tournament=tournament,
        mutation=mutations,
        verbose=False,
    )
    wall = time.perf_counter() - began
    steps_run = state["generations"] * job["evo_steps"] * job["pop"]
    print(
        json.dumps(
            {
                "env_steps": state["solved_at"],
                "wall": wall,
                "steps_run": steps_run,
                "best": float(state["best"]),
                "generations": state["generations"],
            }
        )
    )


if __name__ == "__main__":
    main()
