"""Tensor envs in the IsaacGym style: many copies stepped as torch tensors (`--batched_sampling=True`)."""
