"""Sampling without a learner: trajectories from the rollout and inference workers, for data collection and
evaluation (`sf.runner.sampling_api`)."""
