"""EnvPool as a vector env source: Atari and MuJoCo under Sample Factory's names, one EnvPool per rollout worker."""
