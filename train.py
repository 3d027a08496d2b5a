"""Train from the configs in conf/ (or a manifest file).

python train.py algorithm=ppo env=cartpole
python train.py algorithm=dqn env=acrobot algorithm.lr=3e-4 training.pop_size=4
python train.py manifest=my_run.yaml training.max_steps=50000
python train.py -m algorithm=ppo env=cartpole seed=0,1,2
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from agilerl.launch.entry import prepare_argv, run_task

CONF_DIR = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    return run_task(cfg)


if __name__ == "__main__":
    prepare_argv(CONF_DIR)
    main()
