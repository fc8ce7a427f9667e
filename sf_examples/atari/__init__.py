"""Atari 2600 games (ale-py) as an sf env family, with Sample Factory's names, wrappers and defaults."""
