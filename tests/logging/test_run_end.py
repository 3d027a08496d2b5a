"""The end-of-run report: status, best/final fitness, wall time, run directory."""

from __future__ import annotations

from agilerl.logging.run_end import render_run_end

BASE = {
    "algorithm": "PPO",
    "env": "CartPole-v1",
    "total_steps": 20480,
    "wall_seconds": 12.94,
    "steps_per_second": 1583.0,
    "best_fitness": 500.0,
    "final_fitness": 492.2,
    "final_fitness_std": 23.4,
    "eval_episodes": 10,
    "solved_at_step": 18432,
    "run_dir": "runs/x",
}


def test_each_status_says_how_the_run_ended() -> None:
    cases = {
        "target_reached": "target 475 reached at step 18,432",
        "completed": "budget done at step 20,480 (100,000 steps per agent); target 475 not reached",
        "time_limit": "time limit (training.max_wall_seconds) reached at step 20,480",
        "interrupted": "interrupted at step 20,480; checkpointed",
        "failed": "failed at step 20,480",
    }
    for status, phrase in cases.items():
        text = render_run_end({**BASE, "status": status}, max_steps=100_000, target=475)
        assert text.splitlines()[0] == f"PPO on CartPole-v1: {status}: {phrase}"
        assert "best fitness 500.00, final fitness 492.20 ± 23.40 (std over 10 episodes)" in text
        assert "wall time 12.9 s, 1,583 env steps/s" in text
        assert "run dir runs/x" in text
    interrupted = render_run_end({**BASE, "status": "interrupted"})
    assert "continue with: python train.py resume=runs/x" in interrupted
