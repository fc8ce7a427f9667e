"""Multi-agent envs with Sample Factory's API: a small cooperative game to train and compare with."""
