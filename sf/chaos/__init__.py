"""Fault injection: the run's guarantees, proven by breaking short parallel runs on purpose.

`python -m sf.chaos --runs N` starts N short training runs one after the other (CartPole, VizDoom's doom_basic and
a population of two CartPole policies under population-based training, an inference worker process in each), and at
a random moment does one thing to each (`faults.FAULTS`): SIGKILL of the main process, the fork server, the learner,
an inference worker, a rollout worker or a VizDoom engine; SIGTERM of the main process; SIGSTOP of a component; a full
disk for the learner (RLIMIT_FSIZE) before its next save; a truncated newest checkpoint before a resume; SIGKILL of the
main process or of the receiving learner while one policy's weights are being copied into another. For each it
records how long the run took to end after the fault, its exit code, summary status and error line, the processes and
/dev/shm files left, the newest checkpoint before the fault and the newest one that loads after it (every policy's),
and whether a resume continues from that one (`trial.run_trial`). It prints a table and exits 1 on any hang, leftover,
lost checkpoint, unclear error or failed resume.
"""
