"""The cross-stack breakdown, `python -m sf.profile breakdown -- <training flags>` (`command`): a training run in
this process under torch.profiler (`capture`, through the hooks of Timing, the env registry and the event loop), its
events as spans (`spans`), each instant given to one operation and one layer (`attribution`), the instrumentation's
cost measured (`calibration`, `in_situ`) and subtracted (`correction`), GPU samples (`nvml`) and the table
(`report`)."""
