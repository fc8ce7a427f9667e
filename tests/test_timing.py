import json

import pytest

import sf.utils.timing as timing_module
from sf.utils.timing import Timing


class FakeClock:
    """Stands in for perf_counter; `advance` moves time forward by an exact amount."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timing_module, "_clock", fake)
    return fake


def build_example(clock: FakeClock) -> Timing:
    """a{b, c{d}} plus top-level leaf e, with exact durations."""
    timing = Timing("T")
    with timing.add_time("e"):
        clock.advance(0.001)
    with timing.add_time("a"):
        with timing.add_time("b"):
            clock.advance(0.01)
        with timing.add_time("c"):
            clock.advance(0.01)
            with timing.add_time("d"):
                clock.advance(0.02)
        clock.advance(0.01)
    return timing


def test_tree_string_puts_leaves_of_a_level_on_one_line_before_inner_nodes(clock):
    timing = build_example(clock)
    with timing.add_time("f"):
        clock.advance(0.002)
    expected = "\n".join(
        [
            "T tree view:",
            "e: 0.0010, f: 0.0020",
            "a: 0.0500",
            "  b: 0.0100",
            "  c: 0.0300",
            "    d: 0.0200",
        ]
    )
    assert timing.tree_str() == expected
    assert str(timing) == expected


def test_same_key_under_different_parents_is_two_nodes(clock):
    timing = Timing("T")
    with timing.add_time("x"):
        with timing.add_time("step"):
            clock.advance(1.0)
    with timing.add_time("y"):
        with timing.add_time("step"):
            clock.advance(2.0)
    assert timing.get("x/step") == pytest.approx(1.0)
    assert timing.get("y/step") == pytest.approx(2.0)
    with pytest.raises(KeyError):
        timing.get("step")


def test_add_time_accumulates(clock):
    timing = Timing()
    for seconds in (1.0, 2.0, 4.0):
        with timing.add_time("k"):
            clock.advance(seconds)
    assert timing.get("k") == pytest.approx(7.0)


def test_timeit_keeps_the_last_measurement(clock):
    timing = Timing()
    for seconds in (1.0, 2.0, 4.0):
        with timing.timeit("k"):
            clock.advance(seconds)
    assert timing.get("k") == pytest.approx(4.0)


def test_time_avg_is_a_moving_average_over_the_window(clock):
    timing = Timing()
    means = []
    for seconds in (1.0, 2.0, 3.0):
        with timing.time_avg("k", average=2):
            clock.advance(seconds)
        means.append(timing.get("k"))
    assert means == pytest.approx([1.0, 1.5, 2.5])


def test_time_is_recorded_and_nesting_restored_when_the_block_raises(clock):
    timing = Timing()
    with pytest.raises(RuntimeError):
        with timing.add_time("outer"):
            clock.advance(1.0)
            raise RuntimeError
    with timing.add_time("after"):
        clock.advance(0.5)
    assert timing.flat_items() == [("outer", pytest.approx(1.0)), ("after", pytest.approx(0.5))]


def test_flat_items_lists_every_node_by_path_depth_first(clock):
    timing = build_example(clock)
    paths = [path for path, _ in timing.flat_items()]
    assert paths == ["e", "a", "a/b", "a/c", "a/c/d"]
    assert dict(timing.flat_items())["a/c/d"] == pytest.approx(0.02)


def test_dict_round_trip_through_json_keeps_the_tree(clock):
    timing = build_example(clock)
    data = json.loads(json.dumps(timing.to_dict()))
    assert data["a"]["children"]["c"]["children"]["d"]["time"] == pytest.approx(0.02)
    rebuilt = Timing.from_dict("T", data)
    assert rebuilt.tree_str() == timing.tree_str()
    assert rebuilt.flat_items() == timing.flat_items()
    assert rebuilt.to_dict() == timing.to_dict()


def test_empty_timing_prints_only_the_header():
    assert str(Timing("Runner")) == "Runner tree view:"


def test_scope_hooks_see_paths_and_are_removed(clock) -> None:
    """Hooks observe every mode with the node's full path; once removed, scopes no longer call them."""
    from sf.utils.timing import ScopeHook, add_scope_hook, remove_scope_hook

    timing = Timing("Learner 0")
    events: list[tuple[str, str, str]] = []
    hook = ScopeHook(
        lambda n: events.append(("enter", n.timing.name, n.path)),
        lambda n: events.append(("exit", n.timing.name, n.path)),
    )
    add_scope_hook(hook)
    try:
        with timing.add_time("train"):
            with timing.timeit("update"):
                clock.advance(0.5)
            with timing.time_avg("clip"):
                pass
    finally:
        remove_scope_hook(hook)
    with timing.add_time("train"):
        clock.advance(1.0)
    assert events == [
        ("enter", "Learner 0", "train"),
        ("enter", "Learner 0", "train/update"),
        ("exit", "Learner 0", "train/update"),
        ("enter", "Learner 0", "train/clip"),
        ("exit", "Learner 0", "train/clip"),
        ("exit", "Learner 0", "train"),
    ]
    assert timing.get("train/update") == 0.5
    assert timing.get("train") == 1.5
