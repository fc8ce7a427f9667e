"""MuJoCo through EnvPool: Sample Factory's `sf_examples.envpool.mujoco` entry points and defaults."""
