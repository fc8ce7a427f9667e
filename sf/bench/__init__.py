"""Whole-run benchmarks, `python -m sf.benchmark` (`cli`): the suites against Sample Factory (`suites`), the env
benchmark of one layout (`env_mode`: simulator ceiling, sampling only, training) and the layout auto-tuner (`tune`,
`layouts`); beside them `ray_cluster` (`--backend=ray` on a simulated two-node cluster), `profiling_cost` (what each
profiling setting costs), `learning` (learning curves per env frame against Sample Factory) and `parity` (one Atari
batch through both learners, term by term), each run with `python -m sf.bench.<name>`; `tensor_env_sample_factory`
is Sample Factory's side of the `tensor_pendulum` suite, run by its interpreter. Micro-benchmarks live in
`benchmarks/`."""
