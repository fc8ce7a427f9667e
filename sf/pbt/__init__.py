"""Population-based training with Sample Factory's flags and rules (`--with_pbt`, docs/populations.md).

Above the runtime: an `AlgoObserver` (`population.PopulationBasedTraining`) that the entry point registers on the
runner, which steers the learners only through what the runner offers (`sf.runner.policy_control`). The rules are
plain functions, testable without a run: who is replaced by whom (`selection`), how a hyperparameter or a reward
shaping coefficient mutates (`mutation`); each policy's current values live in the experiment folder
(`policy_files`).
"""
