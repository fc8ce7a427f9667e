"""Brax through batched sampling, with Sample Factory's Brax example's names, flags and defaults."""
