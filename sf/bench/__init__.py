"""The env benchmark (simulator ceiling, sampling only, training) and the layout auto-tuner behind
`python -m sf.benchmark --env=...`; `sf/benchmark.py` is the command line, these modules do the work."""
