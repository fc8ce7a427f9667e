"""PettingZoo parallel envs, trained through `sf.envs.pettingzoo_env`."""
