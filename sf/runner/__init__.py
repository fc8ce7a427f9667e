"""A run: the components built once and placed, watched, reported on and stopped.

`build.py` resolves what every placement needs (env spaces, model, buffers, the kind of rollout worker);
`parallel.py` puts each component in a process of its own, `serial.py` puts all of them on one event loop in this
process. The runner component (`runner.py`) turns what the others report into progress lines, outputs and the
decision to stop, with its counters (`stats.py`), timers and stop status (`control.py`), profile outputs
(`outputs.py`), live view (`live_status.py`), the main process's side of the queues (`mailbox.py`), Sample Factory's
observers (`observers.py`) and the hooks a population steers learners through (`policy_control.py`); its TensorBoard
tags, Sample Factory's beside sf's, are named in `tb_tags.py`. `sampling_api.py` assembles rollout and inference
workers without a learner (Sample Factory's `SyncSamplingAPI`), for data collection and evaluation.
"""
