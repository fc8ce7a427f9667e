"""Ranges on Timing scopes: named `<group>/<key path>`, seen by torch.profiler, gone without a trace when removed."""

from torch.profiler import ProfilerActivity, profile

from sf.profiling.ranges import ScopeRanges, range_name
from sf.utils import timing as timing_module
from sf.utils.timing import Timing


def test_names_follow_group_and_key_path():
    assert range_name("Learner 0", "train/update") == "learner/train/update"
    assert range_name("InferenceWorker_p0-w1", "one_step/forward") == "inference_worker/one_step/forward"
    assert range_name("RolloutWorker_w3", "env_step") == "rollout_worker/env_step"
    assert range_name("Custom", "x") == "Custom/x"


def test_ranges_appear_in_a_torch_trace_only_while_installed():
    timing = Timing("Learner 0")
    ranges = ScopeRanges()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with timing.add_time("before"):
            pass
        ranges.install()
        for _ in range(3):
            with timing.add_time("train"), timing.add_time("update"):
                pass
        ranges.remove()
        with timing.add_time("after"):
            pass
    names = [event.name for event in prof.events()]
    assert names.count("learner/train") == 3 and names.count("learner/train/update") == 3
    assert not any(name in ("learner/before", "learner/after") for name in names)


def test_a_window_closing_inside_a_scope_leaves_ranges_balanced():
    timing = Timing("Batcher 0")
    ranges = ScopeRanges()
    with timing.add_time("outer"):  # opened before the window: no range, and its exit must not pop another's
        ranges.install()
        with timing.add_time("inner"):
            ranges.remove()  # closes inner's range now
        assert ranges.open == []
    ranges.install()
    with timing.add_time("outer"):
        pass
    assert ranges.open == []
    ranges.remove()


def test_removing_restores_the_plain_scope_methods():
    """Outside a window the scopes run the very functions they run without profiling: no added cost at all."""
    plain = {
        cls: (cls.__dict__.get("__enter__"), cls.__dict__["__exit__"])
        for cls in (timing_module._Node, timing_module._LastNode, timing_module._AverageNode)
    }
    ranges = ScopeRanges()
    ranges.install()
    assert timing_module._Node.__dict__["__exit__"] is not plain[timing_module._Node][1]
    ranges.remove()
    assert plain == {cls: (cls.__dict__.get("__enter__"), cls.__dict__["__exit__"]) for cls in plain}
