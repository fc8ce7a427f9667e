"""Train a PettingZoo parallel env: `python -m sf_examples.pettingzoo.train_pettingzoo
--env=pettingzoo:pettingzoo.sisl.pursuit_v5 --pettingzoo_kwargs='{"n_pursuers": 4}'`.

`--env=pettingzoo:<module>` trains `<module>.parallel_env(**kwargs)` (`sf.envs.pettingzoo_env`): every agent of
`possible_agents` acts for the one policy, agents that leave before the episode's end are masked out of training
until it ends, and frames and episodes count per agent. Needs `pip install sf[pettingzoo]`.
"""

from __future__ import annotations

import sys

from sf.envs.families import family_named
from sf.train import run_rl


def main(argv: list[str] | None = None) -> int:
    return run_rl(family_named("pettingzoo").cfg_or_exit(argv))


if __name__ == "__main__":
    sys.exit(main())
