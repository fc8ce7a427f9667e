"""The training components and what they exchange.

A rollout worker steps envs and writes what they return into the shared trajectory buffers; an inference worker runs
the policy on the observations of every pending request; the batcher turns finished trajectories into training
batches; the learner computes the PPO losses and publishes weights through the policy store. They talk only through
the typed messages of `messages.py` (whose `WIRING` table says who sends what to whom), carried by the event loop
(`event_loop.py`). Nothing here knows whether it runs in its own process or beside the others on one loop: that is
the placement's business (`sf.runner`), and keeping processes honest is `sf.supervision`'s.
"""
