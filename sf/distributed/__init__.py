"""The Ray backend (`--backend=ray`): one agent per node owning that node's processes (docs/distributed.md)."""
