"""Which process of a run this is (torchrun's and SLURM's variables) and what rank 0 decides."""

from __future__ import annotations

import pytest

from agilerl.arena.models.errors import ConfigError
from agilerl.training import distributed_run
from agilerl.training.distributed_run import ProcessInfo, process_info


def test_process_info_reads_torchrun_then_slurm() -> None:
    assert process_info({}) == ProcessInfo(0, 1, 0)
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    assert process_info(torchrun) == ProcessInfo(3, 4, 1)
    srun = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "1"}
    info = process_info(srun)
    assert info == ProcessInfo(1, 2, 1) and info.multi and not info.is_main
    # An sbatch script's own shell (no srun step) is one process, whatever --ntasks says.
    assert not process_info({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}).multi


def test_single_paradigms_are_refused_only_with_several_processes(monkeypatch) -> None:
    distributed_run.check_supported("PPO (on-policy)", False)  # one process: fine
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    distributed_run.check_supported("GRPO (LLM rollout)", True)
    with pytest.raises(ConfigError, match="runs in one process"):
        distributed_run.check_supported("PPO (on-policy)", False)
    assert distributed_run.local_device("cuda") == "cuda:0"


def test_without_a_process_group_rank_zero_decides_alone(tmp_path) -> None:
    assert distributed_run.from_main(lambda: 7) == 7
    assert distributed_run.broadcast("x") == "x"
    with distributed_run.claim(tmp_path / "run") as folder:
        assert (folder / ".lock").exists()
    with pytest.raises(ConfigError):
        distributed_run.from_main(lambda: (_ for _ in ()).throw(ConfigError("bad")))
