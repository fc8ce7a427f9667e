"""Sample Factory 2.1.1's half of `python -m sf.bench.parity`, run as a script by Sample Factory's interpreter:
`<sample-factory python> parity_sample_factory.py <workdir>`.

It reads what sf's half wrote to `<workdir>/inputs.pt` (the batch, the weights and normalizer statistics in sf's
names, how far the run's schedule has got), builds Sample Factory's own Learner for the Atari example's config with
those weights, and runs its `_prepare_batch`, `_calculate_losses` on the first minibatch and `_train` over the whole
batch, writing the same quantities as sf's half to `<workdir>/sample_factory.pt`. It imports nothing of sf (the
module runs where sf's code is not importable) and changes nothing of Sample Factory's: the learning rate of every
step is read through the optimizer's step hook.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Sample Factory's parameter names -> sf's, for the Atari network (conv trunk and its FC layer map in order)
HEADS = {
    "critic_linear.weight": "value_head.weight",
    "critic_linear.bias": "value_head.bias",
    "action_parameterization.distribution_linear.weight": "action_head.weight",
    "action_parameterization.distribution_linear.bias": "action_head.bias",
}
OBS_STATS = "obs_normalizer.running_mean_std.running_mean_std.obs."


def parameter_names(sf_state: dict, sample_factory_state: dict) -> dict[str, str]:
    """Sample Factory's name of each parameter -> sf's: the encoder's weights and biases in order, then the heads."""
    sf_encoder = [k for k in sf_state if k.startswith("encoders.0.") and k.rsplit(".", 1)[-1] in ("weight", "bias")]
    encoder = [k for k in sample_factory_state if k.startswith("encoder.encoders.obs.enc.")]
    if len(sf_encoder) != len(encoder):
        raise ValueError(f"the encoders differ: sf {sf_encoder}, Sample Factory {encoder}")
    return {**dict(zip(encoder, sf_encoder)), **HEADS}


def load_sf_state(actor_critic, sf_state: dict) -> dict[str, str]:
    """sf's weights and normalizer statistics into Sample Factory's model (its counts start at 1, sf's at 0)."""
    target = actor_critic.state_dict()
    names = parameter_names(sf_state, target)
    new = {k: sf_state[v].to(target[k].dtype).reshape(target[k].shape).contiguous() for k, v in names.items()}
    new[OBS_STATS + "running_mean"] = sf_state["obs_normalizer.stats.obs.mean"].double()
    new[OBS_STATS + "running_var"] = sf_state["obs_normalizer.stats.obs.var"].double()
    new[OBS_STATS + "count"] = sf_state["obs_normalizer.stats.obs.count"].double().reshape(1).clamp_min(1)
    for ours, theirs in (("mean", "running_mean"), ("var", "running_var"), ("count", "count")):
        value = sf_state[f"returns_normalizer.{ours}"].double().reshape(1)
        new[f"returns_normalizer.{theirs}"] = value.clamp_min(1) if ours == "count" else value
    actor_critic.load_state_dict(new)
    return names


def main(workdir: Path) -> None:
    import importlib

    import gymnasium as gym
    import numpy as np
    import torch
    from sample_factory.algo.learning.learner import Learner
    from sample_factory.algo.utils.env_info import EnvInfo
    from sample_factory.algo.utils.model_sharing import ParameterServer
    from sample_factory.algo.utils.tensor_dict import TensorDict
    from sample_factory.utils.attr_dict import AttrDict

    # Sample Factory's own Atari example, named as a string: sf never imports a module of sf_examples
    atari = importlib.import_module("sf_examples.atari.train_atari")
    parse_atari_args, register_atari_components = atari.parse_atari_args, atari.register_atari_components

    torch.set_num_threads(1)
    inputs = torch.load(workdir / "inputs.pt", weights_only=False)
    register_atari_components()
    cfg = parse_atari_args([*inputs["flags"], f"--train_dir={workdir / 'train_dir'}", "--experiment=parity"])
    obs_space = gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, inputs["obs_shape"], np.uint8)})
    action_space = gym.spaces.Discrete(inputs["num_actions"])
    env_info = EnvInfo(obs_space, action_space, 1, False, False, None, True, cfg.env_frameskip)
    versions = torch.zeros(1, dtype=torch.int32)
    learner = Learner(cfg, env_info, versions, 0, ParameterServer(0, versions, serial_mode=True))
    learner.init()
    names = load_sf_state(learner.actor_critic, inputs["state"])

    b = inputs["batch"]
    n, t1 = b["values"].shape
    batch = TensorDict(
        {
            "obs": TensorDict({"obs": b["obs"]["obs"]}),
            "rnn_states": torch.zeros(n, t1, 1),
            "actions": b["actions"].long(),
            "log_prob_actions": b["log_prob"],
            "action_logits": b["action_logits"],
            "values": b["values_normalized"],  # Sample Factory stores the value head's own output
            "rewards": b["rewards"],
            "dones": b["dones"],
            "time_outs": b["time_outs"],
            "policy_id": torch.zeros(n, t1 - 1, dtype=torch.int32),
            "policy_version": torch.zeros(n, t1 - 1),
            "valids": torch.ones(n, t1, dtype=torch.bool),
        }
    )
    # the schedule where a run of `frames_done` frames has it: one scheduler step per SGD step
    scheduler = learner.lr_scheduler
    if hasattr(scheduler, "linear_decay"):
        scheduler.step = inputs["frames_done"] // cfg.env_frameskip // cfg.batch_size * cfg.num_epochs
        learner.curr_lr = scheduler.linear_decay.at(scheduler.step)
        learner._apply_lr(learner.curr_lr)

    buff, size, invalid = learner._prepare_batch(batch)
    rn = learner.actor_critic.returns_normalizer
    prepared = {"advantages": buff["advantages"], "returns": buff["returns"], "old_values": buff["values"]}
    mb = AttrDict(learner._get_minibatch(buff, learner._get_minibatches(cfg.batch_size, size)[0]))
    dist, policy_loss, exploration_loss, _, _, value_loss, summaries = learner._calculate_losses(mb, invalid)
    first = {
        "advantages": summaries["adv"],
        "returns": mb["returns"],
        "old_values": mb["values"],
        "values": summaries["values"].squeeze(-1),
        "ratio": summaries["ratio"],
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "exploration_loss": exploration_loss,
    }
    (policy_loss + exploration_loss + value_loss).backward()
    sf_names = dict(learner.actor_critic.named_parameters())
    gradients = {names[k]: p.grad.clone() for k, p in sf_names.items() if k in names}
    learner.optimizer.zero_grad(set_to_none=True)

    lrs: list[float] = []
    learner.optimizer.register_step_pre_hook(lambda opt, args, kwargs: lrs.append(opt.param_groups[0]["lr"]))
    learner._train(buff, cfg.batch_size, size, invalid)
    state = learner.actor_critic.state_dict()
    result = {
        "prepared": {k: v.detach().clone() for k, v in prepared.items()},
        "returns_stats": (float(rn.running_mean), float(rn.running_var)),
        "first": {k: v.detach().clone() for k, v in first.items()},
        "gradients": gradients,
        "lrs": lrs,
        "final_state": {sf_key: state[k].clone() for k, sf_key in names.items()},
    }
    torch.save(result, workdir / "sample_factory.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
