"""`python -m sf.bench.parity`: sf's Atari network maps onto Sample Factory 2.1.1's parameter by parameter; and, given
Sample Factory's interpreter (SAMPLE_FACTORY_PYTHON, a venv with sample-factory 2.1.1 and ale-py), one batch through
both learners agrees term by term, step by step in the learning rate, and in the update of a whole iteration."""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest
from conftest import run_sf

from sf.bench.parity_sample_factory import HEADS, parameter_names
from sf.envs.families import family_named
from sf.envs.spaces import ActionSpec
from sf.model import create_actor_critic

# Sample Factory 2.1.1's parameter names and shapes for its Atari example (convnet_atari, 6 actions)
SAMPLE_FACTORY_ATARI = {
    "encoder.encoders.obs.enc.conv_head.0.weight": (32, 4, 8, 8),
    "encoder.encoders.obs.enc.conv_head.0.bias": (32,),
    "encoder.encoders.obs.enc.conv_head.2.weight": (64, 32, 4, 4),
    "encoder.encoders.obs.enc.conv_head.2.bias": (64,),
    "encoder.encoders.obs.enc.conv_head.4.weight": (64, 64, 3, 3),
    "encoder.encoders.obs.enc.conv_head.4.bias": (64,),
    "encoder.encoders.obs.enc.mlp_layers.0.weight": (512, 3136),
    "encoder.encoders.obs.enc.mlp_layers.0.bias": (512,),
    "critic_linear.weight": (1, 512),
    "critic_linear.bias": (1,),
    "action_parameterization.distribution_linear.weight": (6, 512),
    "action_parameterization.distribution_linear.bias": (6,),
}


def atari_model():
    cfg = family_named("atari").parse_cfg(["--env=atari_spaceinvaders", "--device=cpu"])
    return create_actor_critic({"obs": ((4, 84, 84), np.dtype(np.uint8))}, ActionSpec((6,), 0), cfg)


def test_every_parameter_maps_to_one_of_the_same_shape():
    sf_state = atari_model().state_dict()
    names = parameter_names(sf_state, SAMPLE_FACTORY_ATARI)
    assert sorted(names) == sorted(SAMPLE_FACTORY_ATARI)
    assert sorted(names.values()) == sorted(k for k, v in sf_state.items() if "normalizer" not in k)
    for theirs, ours in names.items():
        assert tuple(sf_state[ours].shape) == SAMPLE_FACTORY_ATARI[theirs], (theirs, ours)
    assert {names[k] for k in HEADS} == {
        "value_head.weight",
        "value_head.bias",
        "action_head.weight",
        "action_head.bias",
    }


SAMPLE_FACTORY_PYTHON = os.environ.get("SAMPLE_FACTORY_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLE_FACTORY_PYTHON, reason="set SAMPLE_FACTORY_PYTHON to Sample Factory 2.1.1's python")
def test_one_batch_through_both_learners_agrees(tmp_path):
    """From the checkpoint of a short sf run, halfway through the schedule of a 300k-frame run: the same 16 learning
    rates, the losses of the first minibatch within float noise, its gradient within 1 %, and an update of the same
    length (within 2 %) and direction (cosine above 0.98). Before sf took Sample Factory's linear_decay, its rate
    here was 0.57 of Sample Factory's, its update 0.66 of the length and half that length away. What still differs
    four iterations in:
    the normalizers' starting statistics (sf's start empty, Sample Factory's from one sample of mean 0 and variance
    1) and the old values of the value clip (docs/algorithm.md)."""
    from sf.bench.parity import compare

    warm = run_sf(
        [
            "--env=atari_spaceinvaders",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--device=cpu",
            "--seed=1",
            "--train_for_env_steps=16384",
            f"--train_dir={tmp_path}",
            "--experiment=warm",
        ],
        module="sf_examples.atari.train_atari",
    )
    assert warm.returncode == 0, warm.stdout[-2000:] + warm.stderr[-2000:]
    checkpoint = max((tmp_path / "warm" / "checkpoint_p0").glob("checkpoint_*.pth"), key=lambda p: p.stat().st_mtime)
    args = argparse.Namespace(
        sample_factory=SAMPLE_FACTORY_PYTHON,
        env="atari_spaceinvaders",
        checkpoint=str(checkpoint),
        frames_done=150_000,
        train_for_env_steps=300_000,
        seed=1,
    )
    start, ours, theirs = compare(args, tmp_path / "parity")
    assert ours["lrs"] == pytest.approx(theirs["lrs"], rel=1e-9)
    for term in ("policy_loss", "value_loss", "exploration_loss"):
        assert float(ours["first"][term]) == pytest.approx(float(theirs["first"][term]), abs=1e-3), term

    def norm(tensors):
        return sum(float(t.double().norm()) ** 2 for t in tensors) ** 0.5

    names = list(theirs["gradients"])
    gradient_gap = norm(ours["gradients"][k] - theirs["gradients"][k] for k in names)
    assert gradient_gap < 0.01 * norm(theirs["gradients"][k] for k in names)
    names = list(theirs["final_state"])
    ours_moved = [ours["final_state"][k].double() - start[k].double() for k in names]
    theirs_moved = [theirs["final_state"][k].double() - start[k].double() for k in names]
    assert norm(ours_moved) == pytest.approx(norm(theirs_moved), rel=0.02)
    cosine = sum(float((a * b).sum()) for a, b in zip(ours_moved, theirs_moved)) / norm(ours_moved) / norm(theirs_moved)
    assert cosine > 0.98
