"""One Atari batch through sf's learner and Sample Factory 2.1.1's, term by term:
`python -m sf.bench.parity --sample_factory /path/to/sf-venv/bin/python [--env atari_qbert] [--checkpoint CK]
[--frames_done N]`.

sf's policy (fresh, or the weights and normalizer statistics of an sf checkpoint) plays 8 envs for one rollout of
the Atari example's config; the batch and the weights then go through sf's learner here and through Sample Factory's
own Learner (`parity_sample_factory.py`, run by its interpreter), each with its learning-rate schedule where a run of
`--frames_done` frames has it. Printed side by side: the returns' statistics after the batch's update, advantages,
normalized returns and old values as prepared, every term of the loss and the gradient on the first minibatch, the
learning rate of each of the 16 SGD steps, and how far the whole iteration moved the weights on each side and apart.
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import tempfile
from pathlib import Path

N_ENVS = 8  # 2 workers x 4 envs: one rollout of each is one 1024-sample iteration
SAMPLE_FACTORY_HALF = Path(__file__).with_name("parity_sample_factory.py")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sf.bench.parity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sample_factory", required=True, help="python of a venv with sample-factory 2.1.1")
    parser.add_argument("--env", default="atari_spaceinvaders", help="an Atari game of sf_examples.atari")
    parser.add_argument("--checkpoint", default=None, help="an sf checkpoint of that game (default: fresh weights)")
    parser.add_argument("--frames_done", type=int, default=0, help="frames the run has trained (for the lr schedule)")
    parser.add_argument("--train_for_env_steps", type=int, default=300_000, help="the run's length (lr schedule)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", default=None, help="keep the batch and both results here (default: a temp dir)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not Path(args.sample_factory).is_file():
        print(f"sf.bench.parity: error: --sample_factory: {args.sample_factory} is not a file", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="sf_parity_") as tmp:
        workdir = Path(args.workdir or tmp)
        try:
            start, ours, theirs = compare(args, workdir)
        except RuntimeError as exc:
            print(f"sf.bench.parity: {exc}", file=sys.stderr)
            return 1
        print(report(start, ours, theirs))
    return 0


def compare(args: argparse.Namespace, workdir: Path) -> tuple[dict, dict, dict]:
    """Both halves on one batch: (the starting weights, sf's results, Sample Factory's results)."""
    import torch

    torch.set_num_threads(1)
    workdir.mkdir(parents=True, exist_ok=True)
    flags = [
        f"--env={args.env}",
        "--num_workers=2",
        f"--num_envs_per_worker={N_ENVS // 2}",
        "--device=cpu",
        f"--seed={args.seed}",
        f"--train_for_env_steps={args.train_for_env_steps}",
    ]
    inputs, ours = sf_half(flags, args, workdir)
    torch.save(inputs, workdir / "inputs.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # Sample Factory's own sf_examples
    with open(workdir / "sample_factory.log", "w") as log:
        cmd = [args.sample_factory, str(SAMPLE_FACTORY_HALF), str(workdir)]
        proc = subprocess.run(cmd, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = (workdir / "sample_factory.log").read_text()[-3000:]
        raise RuntimeError(f"{tail}\nSample Factory's half failed (exit {proc.returncode})")
    return inputs["state"], ours, torch.load(workdir / "sample_factory.pt", weights_only=False)


def sf_half(flags: list[str], args: argparse.Namespace, workdir: Path) -> tuple[dict, dict]:
    """Collect the batch with sf's policy, then run sf's learner on it; returns (inputs for the other half, results)."""
    import torch

    from sf.algo.ppo_loss import normalize_advantages, ppo_losses
    from sf.envs.families import family_named
    from sf.experiment.checkpoint import CheckpointManager, load_state
    from sf.model import create_actor_critic
    from sf.runtime.event_loop import EventLoop
    from sf.runtime.learner import Learner
    from sf.runtime.policy_store import LocalPolicyStore
    from sf.utils.roles import RUNNER, batcher_name

    cfg = family_named("atari").parse_cfg([*flags, f"--train_dir={workdir / 'train_dir'}", "--experiment=parity"])
    envs = _make_envs(cfg)
    torch.manual_seed(args.seed)
    model = create_actor_critic(envs[0].obs_spec, envs[0].action_spec, cfg)
    if args.checkpoint:
        model.load_state_dict(load_state(Path(args.checkpoint))["model"])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batch = collect(model, envs, cfg.rollout, args.seed)

    learner = Learner(cfg, 0, model, LocalPolicyStore(), "cpu", CheckpointManager(workdir / "ckpt", 0, keep=1), 1.0)
    EventLoop(routes={RUNNER: queue.Queue(), batcher_name(0): queue.Queue()}).add(learner)
    learner.on_start()
    learner.env_steps = args.frames_done
    learner.sgd_steps = args.frames_done // cfg.env_frameskip // cfg.batch_size * cfg.num_epochs
    learner._set_lr(learner.lr_schedule.value(learner.sgd_steps))
    learner.env_steps += N_ENVS * cfg.rollout * cfg.env_frameskip
    data = learner._prepare(batch)
    prepared = {k: data[k].clone() for k in ("advantages", "returns", "old_values")}
    returns_stats = (float(model.returns_normalizer.mean), float(model.returns_normalizer.var))

    inputs = learner._loss_inputs(data, torch.arange(cfg.batch_size), 1)  # the first minibatch
    losses = ppo_losses(inputs, learner._coefficients())
    losses["total_loss"].backward()
    gradients = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    learner.optimizer.zero_grad(set_to_none=True)
    first = {
        "advantages": normalize_advantages(inputs.advantages, inputs.valids),
        "returns": inputs.returns,
        "old_values": inputs.old_values,
        "values": inputs.values,
        "ratio": (inputs.log_prob - inputs.old_log_prob).exp(),
        **{k: losses[k] for k in ("policy_loss", "value_loss", "exploration_loss")},
    }
    lrs: list[float] = []
    learner.optimizer.register_step_pre_hook(lambda opt, a, k: lrs.append(opt.param_groups[0]["lr"]))
    learner._train(data)
    for env in envs:
        env.close()
    ours = {
        "prepared": prepared,
        "returns_stats": returns_stats,
        "first": {k: v.detach().clone() for k, v in first.items()},
        "gradients": gradients,
        "lrs": lrs,
        "final_state": {k: v.clone() for k, v in model.state_dict().items()},
    }
    shape = tuple(batch["obs"]["obs"].shape[2:])
    inputs_for_them = {
        "flags": flags,
        "batch": batch,
        "state": state,
        "frames_done": args.frames_done,
        "obs_shape": shape,
        "num_actions": envs[0].action_spec.num_logits,
    }
    return inputs_for_them, ours


def _make_envs(cfg) -> list:
    from sf.envs.adapter import EnvAdapter
    from sf.envs.registry import EnvConfig, create_env

    per_worker = N_ENVS // 2
    configs = [EnvConfig(i // per_worker, i % per_worker, i) for i in range(N_ENVS)]
    return [EnvAdapter(create_env(cfg.env, cfg, config), cfg.env_framestack) for config in configs]


def collect(model, envs: list, rollout: int, seed: int) -> dict:
    """One rollout of every env under the model's policy, stored as both learners read it: T + 1 observations and
    values (in return units for sf, the value head's own output for Sample Factory), T of everything else."""
    import numpy as np
    import torch

    n, t_max = len(envs), rollout
    obs = [env.reset(seed=seed * 1000 + i)["obs"].copy() for i, env in enumerate(envs)]
    batch = {
        "obs": {"obs": torch.zeros(n, t_max + 1, *obs[0].shape, dtype=torch.uint8)},
        "actions": torch.zeros(n, t_max, 1),
        "log_prob": torch.zeros(n, t_max),
        "action_logits": torch.zeros(n, t_max, model.num_action_params),
        "values": torch.zeros(n, t_max + 1),
        "values_normalized": torch.zeros(n, t_max + 1),
        "rewards": torch.zeros(n, t_max),
        "dones": torch.zeros(n, t_max),
        "time_outs": torch.zeros(n, t_max),
        "rnn_states": torch.zeros(n, t_max + 1, 0),
        "policy_version": torch.zeros(n, t_max, dtype=torch.int64),
    }
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in range(t_max + 1):
            x = torch.from_numpy(np.stack(obs))
            batch["obs"]["obs"][:, t] = x
            core, _ = model.forward_core(model.forward_head(model.normalize_obs({"obs": x})), None)
            logits, normalized = model.forward_tail(core)
            batch["values_normalized"][:, t] = normalized
            batch["values"][:, t] = model.returns_normalizer.denormalize(normalized)
            if t == t_max:
                break
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).float()
            batch["actions"][:, t] = actions
            batch["log_prob"][:, t] = model.action_distribution(logits).log_prob(actions)
            batch["action_logits"][:, t] = logits
            for i, env in enumerate(envs):
                o, reward, terminated, truncated, _ = env.step(actions[i].numpy())
                batch["rewards"][i, t] = reward
                batch["dones"][i, t] = float(terminated or truncated)
                batch["time_outs"][i, t] = float(truncated)
                obs[i] = (env.reset() if terminated or truncated else o)["obs"].copy()
    return batch


def report(start: dict, ours: dict, theirs: dict) -> str:
    import torch

    def row(name: str, a, b) -> str:
        a, b = torch.as_tensor(a).double().reshape(-1), torch.as_tensor(b).double().reshape(-1)
        spread = lambda x: float(x.std()) if x.numel() > 1 else 0.0  # noqa: E731
        return (
            f"{name:30s} {float(a.mean()):+10.5f} {spread(a):9.5f}   {float(b.mean()):+10.5f} {spread(b):9.5f}"
            f"   {float((a - b).abs().max()):9.2e}"
        )

    def norm(tensors) -> float:
        return sum(float(t.double().norm()) ** 2 for t in tensors) ** 0.5

    lines = [f"{'':30s} {'sf mean':>10s} {'std':>9s}   {'SF mean':>10s} {'std':>9s}   {'max|diff|':>9s}"]
    (m_a, v_a), (m_b, v_b) = ours["returns_stats"], theirs["returns_stats"]
    lines.append(f"{'returns statistics (mean, var)':30s} {m_a:+10.5f} {v_a:9.5f}   {m_b:+10.5f} {v_b:9.5f}")
    lines += [row(f"prepared {k}", ours["prepared"][k], theirs["prepared"][k]) for k in ours["prepared"]]
    lines += [row(f"minibatch 0 {k}", ours["first"][k], theirs["first"][k]) for k in ours["first"]]
    names = list(theirs["gradients"])
    g_a, g_b = [ours["gradients"][k] for k in names], [theirs["gradients"][k] for k in names]
    lines.append(
        f"minibatch 0 gradient norm: sf {norm(g_a):.4f}, Sample Factory {norm(g_b):.4f}, "
        f"of their difference {norm(a - b for a, b in zip(g_a, g_b)):.4f}"
    )
    lr_a, lr_b = ours["lrs"], theirs["lrs"]
    lines.append(
        f"learning rate of the {len(lr_a)} SGD steps: sf {lr_a[0]:.4e} .. {lr_a[-1]:.4e}, "
        f"Sample Factory ({len(lr_b)} steps) {lr_b[0]:.4e} .. {lr_b[-1]:.4e}"
    )
    names = list(theirs["final_state"])
    moved_a = norm(ours["final_state"][k] - start[k] for k in names)
    moved_b = norm(theirs["final_state"][k] - start[k] for k in names)
    apart = norm(ours["final_state"][k] - theirs["final_state"][k] for k in names)
    lines.append(
        f"weights moved by the iteration: sf {moved_a:.4f}, Sample Factory {moved_b:.4f}; apart after it {apart:.4f}"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
