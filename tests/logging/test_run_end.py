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


def test_each_paradigm_reports_in_its_own_units() -> None:
    from agilerl.strategies.bandit import BanditStrategy
    from agilerl.strategies.llm import LLMDatasetStrategy, LLMRolloutStrategy

    grpo = {**BASE, "algorithm": "GRPO", "env": "data/digits.jsonl", "status": "completed"}
    grpo |= {"total_steps": 40, "steps_per_second": 1.7, "best_fitness": 1.0}
    strategy = LLMRolloutStrategy
    text = render_run_end(
        grpo, max_steps=40, unit=strategy.step_unit, fitness_name=strategy.fitness_name
    )
    assert "budget done at round 40 (40 rounds per agent)" in text
    assert "best held-out reward 1.00" in text and "1.7 rounds/s" in text
    assert "env steps" not in text
    assert LLMDatasetStrategy.step_unit == ("batch", "batches")
    assert BanditStrategy.step_unit == ("pull", "pulls")


def test_plain_progress_lines_show_an_eta_in_the_paradigm_unit(capsys) -> None:
    from agilerl.logging.progress import TrainingProgress

    progress = TrainingProgress(100, "GRPO digits", unit=("round", "rounds"),
                                fitness_name="held-out reward")  # fmt: skip
    progress.evaluation(40, [0.5], steps_per_second=2.0)  # 60 rounds left at 2 a second
    progress.evaluation(100, [0.9], steps_per_second=2.0)
    first, last = capsys.readouterr().err.strip().splitlines()
    assert first.startswith("GRPO digits: round 40/100  2.0 rounds/s  eta 30s  held-out reward")
    assert "eta" not in last  # the budget is spent
