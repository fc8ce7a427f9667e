"""Offline analysis of a finished run, behind `python -m sf.profile report` (`cli`): an experiment folder as data
(`run_data`), the bottleneck model and its verdict (`bottleneck`), the report (`report`), the key-by-key diff of two
runs (`compare`) and the charts of both (`charts`, which draw plain rows). Reads only the files a run writes."""
