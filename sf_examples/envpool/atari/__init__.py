"""Atari through EnvPool: Sample Factory's `sf_examples.envpool.atari` entry points and defaults."""
