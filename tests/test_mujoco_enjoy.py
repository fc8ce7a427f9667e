"""Evaluation of a MuJoCo experiment: without video always, with an mp4 when an OpenGL backend renders,
and one line of advice (then evaluation without video) when none does. Backend choice is unit-tested with fake
probes."""

from __future__ import annotations

import os

import imageio.v2 as imageio
import pytest
from conftest import run_sf

pytest.importorskip("mujoco")

from sf_examples.mujoco.gl_backend import (  # noqa: E402
    candidate_backends,
    choose_gl_backend,
    probe_backend,
    setup_gl_backend,
)

TRAIN = "sf_examples.mujoco.train_mujoco"
ENJOY = "sf_examples.mujoco.enjoy_mujoco"
TINY = [
    "--env=mujoco_pendulum",
    "--serial_mode=True",
    "--async_rl=False",
    "--train_for_env_steps=2048",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=32",
    "--batch_size=256",
    "--num_batches_per_epoch=1",
    "--num_epochs=1",
    "--seed=1",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A few thousand frames of pendulum training: enough for a checkpoint; its episodes are short."""
    train_dir = tmp_path_factory.mktemp("mujoco_enjoy")
    result = run_sf([*TINY, f"--train_dir={train_dir}", "--experiment=tiny"], module=TRAIN)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return train_dir


def _enjoy(train_dir, *extra):
    return run_sf(
        ["--env=mujoco_pendulum", f"--train_dir={train_dir}", "--experiment=tiny", "--max_num_episodes=1", *extra],
        module=ENJOY,
        timeout=180,
    )


def _working_backend() -> str | None:
    backend, _ = choose_gl_backend(os.environ)
    return backend


def test_enjoy_without_video(trained):
    video = trained / "tiny" / "replay.mp4"
    video.unlink(missing_ok=True)
    result = _enjoy(trained)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "episode 1: reward" in result.stdout and "Avg episode reward:" in result.stdout
    assert "over 1 episodes" in result.stdout
    assert not video.exists()


def test_enjoy_saves_video(trained):
    backend = _working_backend()
    if backend is None:
        pytest.skip("no OpenGL backend can render MuJoCo here (see docs/mujoco.md)")
    result = _enjoy(trained, "--save_video", "--video_name=one_episode.mp4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    video = trained / "tiny" / "one_episode.mp4"
    assert f"video written to {video}" in result.stdout
    frames = imageio.mimread(video, memtest=False)
    assert len(frames) >= 1 and frames[0].ndim == 3 and frames[0].shape[2] == 3
    assert frames[0].std() > 1.0  # a rendered scene, not a blank buffer


def test_enjoy_without_backend_advises_and_still_evaluates(trained, monkeypatch):
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        pytest.skip("GLFW can open a window here, so it is not a failing backend")
    monkeypatch.setenv("MUJOCO_GL", "glfw")  # without a display GLFW cannot make a context
    video = trained / "tiny" / "no_backend.mp4"
    result = _enjoy(trained, "--save_video", "--video_name=no_backend.mp4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    advice = [line for line in result.stdout.splitlines() if "no OpenGL backend" in line]
    assert len(advice) == 1 and "libosmesa6" in advice[0] and "MUJOCO_GL=osmesa" in advice[0]
    assert "MUJOCO_GL=glfw was set" in advice[0]
    assert "Avg episode reward:" in result.stdout
    assert not video.exists()


# backend choice, with fake probes ---------------------------------------------------------------------


def test_user_choice_is_probed_and_never_replaced():
    probed = []
    backend, advice = choose_gl_backend({"MUJOCO_GL": "osmesa"}, probe=lambda b: probed.append(b) or True)
    assert (backend, advice, probed) == ("osmesa", None, ["osmesa"])
    backend, advice = choose_gl_backend({"MUJOCO_GL": "egl"}, probe=lambda b: False)
    assert backend is None and "MUJOCO_GL=egl was set" in advice


def test_first_backend_that_renders_wins():
    probed = []

    def probe(backend):
        probed.append(backend)
        return backend == "osmesa"

    assert choose_gl_backend({}, probe=probe, platform="linux") == ("osmesa", None)
    assert probed == ["egl", "osmesa"]


def test_no_backend_gives_one_line_of_advice():
    backend, advice = choose_gl_backend({}, probe=lambda b: False, platform="linux")
    assert backend is None
    assert "\n" not in advice and "tried egl, osmesa" in advice
    assert "apt-get install -y libosmesa6" in advice and "MUJOCO_GL=egl" in advice


def test_candidates_follow_the_platform():
    assert candidate_backends({}, "linux") == ["egl", "osmesa"]
    assert candidate_backends({"DISPLAY": ":0"}, "linux") == ["egl", "osmesa", "glfw"]
    assert candidate_backends({}, "darwin")[-1] == "glfw"


def test_probe_rejects_an_unknown_backend():
    assert probe_backend("no_such_backend") is False


def test_setup_exports_the_choice_only_when_the_user_made_none(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "")
    assert setup_gl_backend(probe=lambda b: b == "osmesa") == ("osmesa", None)
    assert os.environ["MUJOCO_GL"] == "osmesa"
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert setup_gl_backend(probe=lambda b: True) == ("egl", None) and os.environ["MUJOCO_GL"] == "egl"
    backend, advice = setup_gl_backend(probe=lambda b: False)
    assert backend is None and os.environ["MUJOCO_GL"] == "disable"  # evaluation without video can still import mujoco
