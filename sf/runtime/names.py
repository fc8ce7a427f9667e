"""Component names: they are message addresses and the labels of the profile trees, printed at exit as
`<name> profile tree view:` in the order `profile_order` gives (docs/timing.md, "How a run uses it")."""

RUNNER = "Runner"


def rollout_worker_name(worker_idx: int) -> str:
    return f"RolloutWorker_w{worker_idx}"


def inference_worker_name(policy_id: int, worker_idx: int) -> str:
    return f"InferenceWorker_p{policy_id}-w{worker_idx}"


def policy_queue_name(policy_id: int) -> str:
    """Address shared by all inference workers of one policy: whichever is free takes the request."""
    return f"policy_p{policy_id}"


def batcher_name(policy_id: int) -> str:
    return f"Batcher {policy_id}"


def learner_name(policy_id: int) -> str:
    return f"Learner {policy_id}"


def profile_order(name: str) -> tuple:
    """Contract order of the printed trees: Batcher, InferenceWorker, Learner, RolloutWorker, then Runner."""
    kinds = ("Batcher", "InferenceWorker", "Learner", "RolloutWorker", "Runner")
    kind = next((i for i, k in enumerate(kinds) if name.startswith(k)), len(kinds))
    digits = [int(part) for part in "".join(c if c.isdigit() else " " for c in name).split()]
    return (kind, digits, name)
