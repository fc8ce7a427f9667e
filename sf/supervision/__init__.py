"""What keeps a run's processes honest: started right, linked to the main process, watched, restarted or stopped,
and leaving nothing behind.

Processes start from a fork server (`process_start.py`) and die with the main process (`parent_link.py`,
`fork_server_link.py`); the supervisor (`supervisor.py`) owns their lifetimes and the guard (`guard.py`) outlives the
main process briefly to end what it left. `orphans.py` finds processes a component started, `shm_names.py` the
/dev/shm names the run owns (the only ones cleanup removes), `engine_watch.py` a worker stuck on a dead env engine.
Healing a component in place (`healer.py`) uses incarnations (`incarnations.py`: which life of a component a message
belongs to) and takes back queues a dead process left locked (`queue_locks.py`). `shared_flags.py` holds the stop
flag and heartbeats; `serial_watch.py` lets a one-process run answer Ctrl-C whatever it is stuck in.
"""
