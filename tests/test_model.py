"""ActorCritic shapes for vector, image and dict observations; RNN sequence vs step equivalence; observation
normalization; checkpoint round trips."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch
from torch import nn

from sf.envs.spaces import ActionSpec, action_space_from_spec, obs_space_from_spec
from sf.model import create_actor_critic
from sf.model.actor_critic import builtin_actor_critic
from sf.model.cores import RnnCore
from sf.model.encoders import ConvEncoder

torch.set_num_threads(1)

DEFAULTS = dict(
    encoder_mlp_layers=[32, 16],
    encoder_conv_architecture="convnet_simple",
    encoder_conv_mlp_layers=[512],
    nonlinearity="elu",
    use_rnn=False,
    rnn_type="gru",
    rnn_size=24,
    rnn_num_layers=1,
    decoder_mlp_layers=[],
    actor_critic_share_weights=True,
    adaptive_stddev=False,
    initial_stddev=1.0,
    continuous_tanh_scale=0.0,
    policy_initialization="orthogonal",
    policy_init_gain=1.0,
    init_all_layers=False,
    normalize_input=False,
    normalize_input_keys=None,
    obs_subtract_mean=0.0,
    obs_scale=1.0,
    normalize_returns=False,
    precision="fp32",
)
VECTOR_SPEC = {"obs": ((7,), np.dtype(np.float32))}
DOOM_SHAPE = (3, 72, 128)


def cfg(**overrides) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**DEFAULTS, **overrides})


def vector_obs(b: int, seed: int = 0) -> dict[str, torch.Tensor]:
    return {"obs": torch.randn(b, 7, generator=torch.Generator().manual_seed(seed))}


def conv_output_shapes(module: nn.Module, x: torch.Tensor) -> list[tuple[int, ...]]:
    shapes = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: shapes.append(tuple(o.shape[1:])))
        for m in module.modules()
        if isinstance(m, nn.Conv2d)
    ]
    module(x)
    for h in hooks:
        h.remove()
    return shapes


@pytest.mark.parametrize("use_rnn,share", [(False, True), (True, True), (True, False), (False, False)])
def test_vector_obs_discrete_shapes(use_rnn, share):
    config = cfg(use_rnn=use_rnn, actor_critic_share_weights=share)
    model = create_actor_critic(VECTOR_SPEC, ActionSpec((4,), 0), config)
    assert model.rnn_state_size == (24 * (1 if share else 2) if use_rnn else 0)
    h = torch.zeros(5, model.rnn_state_size) if use_rnn else None
    out = model.policy_step(model.normalize_obs(vector_obs(5)), h)
    assert out.actions.shape == (5, 1) and out.log_prob.shape == (5,) and out.values.shape == (5,)
    assert out.action_logits.shape == (5, 4)
    assert out.new_rnn_states.shape == (5, model.rnn_state_size)
    assert set(out.actions.flatten().tolist()) <= {0.0, 1.0, 2.0, 3.0}


def test_convnet_simple_layer_shapes():
    model = create_actor_critic({"obs": (DOOM_SHAPE, np.dtype(np.uint8))}, ActionSpec((6,), 0), cfg())
    encoder = model.encoders[0].encoders[0]
    x = torch.zeros(2, *DOOM_SHAPE)
    assert conv_output_shapes(encoder.trunk, x) == [(32, 17, 31), (64, 7, 14), (128, 3, 6)]
    assert encoder.mlp[0].in_features == 128 * 3 * 6 and encoder.out_size == 512
    obs = model.normalize_obs({"obs": torch.zeros(2, *DOOM_SHAPE, dtype=torch.uint8)})
    assert model.forward_head(obs).shape == (2, 512)


@pytest.mark.parametrize(
    "arch,conv_shapes,flat",
    [
        ("convnet_atari", [(32, 20, 20), (64, 9, 9), (64, 7, 7)], 64 * 7 * 7),
        (
            "convnet_impala",
            [(16, 84, 84)]
            + [(16, 42, 42)] * 4
            + [(32, 42, 42)]
            + [(32, 21, 21)] * 4
            + [(32, 21, 21)]
            + [(32, 11, 11)] * 4,
            32 * 11 * 11,
        ),
    ],
)
def test_other_conv_architectures(arch, conv_shapes, flat):
    model = create_actor_critic(
        {"obs": ((4, 84, 84), np.dtype(np.uint8))},
        ActionSpec((3,), 0),
        cfg(encoder_conv_architecture=arch, encoder_conv_mlp_layers=[256]),
    )
    encoder = model.encoders[0].encoders[0]
    assert conv_output_shapes(encoder.trunk, torch.zeros(1, 4, 84, 84)) == conv_shapes
    assert encoder.mlp[0].in_features == flat and encoder.out_size == 256


def test_too_small_image_is_a_clear_error():
    with pytest.raises(ValueError, match="too small"):
        create_actor_critic({"obs": ((3, 16, 16), np.dtype(np.uint8))}, ActionSpec((3,), 0), cfg())


def test_dict_obs_concatenates_per_key_encoders_mixed_actions():
    spec = {"image": (DOOM_SHAPE, np.dtype(np.uint8)), "measurements": ((5,), np.dtype(np.float32))}
    action_spec = ActionSpec((3, 2), 2)
    model = create_actor_critic(spec, action_spec, cfg(use_rnn=True, rnn_type="lstm"))
    assert model.encoders[0].out_size == 512 + 16
    obs = {"image": torch.randint(0, 256, (4, *DOOM_SHAPE), dtype=torch.uint8), "measurements": torch.randn(4, 5)}
    out = model.policy_step(model.normalize_obs(obs), torch.zeros(4, model.rnn_state_size))
    assert model.rnn_state_size == 2 * 24
    assert out.actions.shape == (4, action_spec.flat_dim)
    assert out.action_logits.shape == (4, action_spec.num_logits + action_spec.continuous_dim) == (4, 9)
    assert set(out.actions[:, 0].tolist()) <= {0.0, 1.0, 2.0} and set(out.actions[:, 1].tolist()) <= {0.0, 1.0}


def head_features(model, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    core, _ = model.forward_core(model.forward_head(obs), None)
    return core


def test_gaussian_stddev_fixed_and_adaptive():
    spec = ActionSpec((), 3)
    obs = vector_obs(8)
    fixed = create_actor_critic(VECTOR_SPEC, spec, cfg(initial_stddev=0.5))
    assert fixed.log_std.shape == (3,) and fixed.num_action_params == 6
    params = fixed.forward_tail(head_features(fixed, obs))["action_logits"]
    x = head_features(fixed, obs)
    torch.testing.assert_close(params[:, :3], x @ fixed.action_head.weight.t() + fixed.action_head.bias)
    torch.testing.assert_close(params[:, 3:], torch.full((8, 3), math.log(0.5)))
    torch.testing.assert_close(fixed.action_distribution(params).std, torch.full((8, 3), 0.5))

    # state-dependent: the head's last 3 outputs are log stds, initial_stddev plays no part (as in Sample Factory)
    adaptive = create_actor_critic(VECTOR_SPEC, spec, cfg(adaptive_stddev=True, initial_stddev=0.5))
    assert adaptive.log_std is None and adaptive.num_action_params == 6
    params = adaptive.forward_tail(head_features(adaptive, obs))["action_logits"]
    x = head_features(adaptive, obs)
    torch.testing.assert_close(params, x @ adaptive.action_head.weight.t() + adaptive.action_head.bias)
    torch.testing.assert_close(adaptive.action_distribution(params).std, params[:, 3:].exp())
    huge = params.detach().clone()
    huge[:, 3:] = 50.0
    torch.testing.assert_close(adaptive.action_distribution(huge).std, torch.full((8, 3), 1e4))

    # a Tuple mixing categorical and continuous parts always has state-dependent stds, whatever the flag
    mixed = create_actor_critic(VECTOR_SPEC, ActionSpec((4,), 2), cfg(adaptive_stddev=False))
    assert mixed.log_std is None and mixed.action_head.out_features == 4 + 2 + 2


def test_continuous_tanh_scale_bounds_means():
    model = create_actor_critic(VECTOR_SPEC, ActionSpec((), 2), cfg(continuous_tanh_scale=0.1))
    obs = {"obs": torch.randn(64, 7) * 10}
    with torch.no_grad():
        model.action_head.weight.mul_(1000.0)
        params = model.forward_tail(head_features(model, obs))["action_logits"]
        raw = head_features(model, obs) @ model.action_head.weight.t() + model.action_head.bias
    torch.testing.assert_close(params[:, :2], 0.1 * torch.tanh(raw / 0.1))
    assert raw.abs().max() > 1.0  # the squashing did bite


def test_values_are_denormalized_in_policy_output():
    model = create_actor_critic(VECTOR_SPEC, ActionSpec((3,), 0), cfg(normalize_returns=True))
    model.returns_normalizer.update(torch.tensor([10.0, 20.0, 30.0]))
    obs = model.normalize_obs(vector_obs(6))
    normalized = model.forward_tail(model.forward_head(obs))["values"]
    out = model.policy_step(obs, None)
    torch.testing.assert_close(out.values, model.returns_normalizer.denormalize(normalized))
    assert not torch.allclose(out.values, normalized)


def step_by_step(core: RnnCore, x: torch.Tensor, h0: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
    h, outs = h0, []
    for t in range(x.shape[1]):
        out, h = core(x[:, t], h)
        outs.append(out)
        h = h * (1.0 - dones[:, t : t + 1])
    return torch.stack(outs, dim=1)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("with_dones", [False, True])
def test_rnn_sequence_equals_steps_with_resets(rnn_type, num_layers, with_dones):
    torch.manual_seed(0)
    core = RnnCore(6, rnn_type, 8, num_layers)
    n, t = 5, 7
    x, h0 = torch.randn(n, t, 6), torch.randn(n, core.state_size)
    dones = torch.zeros(n, t)
    if with_dones:
        dones[0, 2] = dones[0, 3] = dones[2, 0] = dones[3, 5] = dones[4, 6] = 1.0  # incl. consecutive and last-step
    torch.testing.assert_close(core.forward_seq(x, h0, dones), step_by_step(core, x, h0, dones))


def test_rnn_sequence_with_resets_backpropagates_like_steps():
    torch.manual_seed(1)
    core = RnnCore(4, "gru", 6, 1)
    x, h0 = torch.randn(3, 6, 4), torch.randn(3, core.state_size)
    dones = torch.zeros(3, 6)
    dones[1, 1] = dones[2, 3] = 1.0
    core.forward_seq(x, h0, dones).square().sum().backward()
    seq_grads = [p.grad.clone() for p in core.parameters()]
    core.zero_grad()
    step_by_step(core, x, h0, dones).square().sum().backward()
    for seq_grad, p in zip(seq_grads, core.parameters()):
        torch.testing.assert_close(seq_grad, p.grad)


def test_actor_critic_core_seq_with_separate_branches_equals_steps():
    torch.manual_seed(2)
    model = create_actor_critic(
        VECTOR_SPEC, ActionSpec((3,), 0), cfg(use_rnn=True, rnn_type="lstm", actor_critic_share_weights=False)
    )
    n, t = 3, 5
    x = model.forward_head({"obs": torch.randn(n * t, 7)}).view(n, t, -1)
    h = h0 = torch.randn(n, model.rnn_state_size)
    dones = torch.zeros(n, t)
    dones[1, 2] = 1.0
    steps = []
    for i in range(t):
        out, h = model.forward_core(x[:, i], h)
        steps.append(out)
        h = h * (1.0 - dones[:, i : i + 1])
    torch.testing.assert_close(model.forward_core_seq(x, h0, dones), torch.stack(steps, dim=1))


def test_normalize_obs_updates_only_when_asked_and_scales_uint8():
    spec = {"image": ((1, 2, 2), np.dtype(np.uint8)), "vec": ((3,), np.dtype(np.float32))}
    model = create_actor_critic(
        spec,
        ActionSpec((2,), 0),
        cfg(
            normalize_input=True,
            normalize_input_keys=["vec"],
            obs_subtract_mean=100.0,
            obs_scale=50.0,
            encoder_conv_architecture="convnet_impala",
        ),
    )
    image = torch.full((4, 1, 2, 2), 200, dtype=torch.uint8)
    vec = torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]).repeat(2, 1)
    vec_before = vec.clone()
    stats = model.obs_normalizer.stats["vec"]

    out = model.normalize_obs({"image": image, "vec": vec})
    assert stats.count.item() == 0 and torch.equal(stats.mean, torch.zeros(3))
    assert out["image"].dtype == torch.float32 and torch.allclose(out["image"], torch.full((4, 1, 2, 2), 2.0))
    torch.testing.assert_close(out["vec"], vec / math.sqrt(1 + 1e-5))

    out = model.normalize_obs({"image": image, "vec": vec}, update=True)
    assert stats.count.item() == 4
    torch.testing.assert_close(stats.mean, torch.tensor([2.0, 3.0, 4.0]))
    torch.testing.assert_close(out["vec"], torch.tensor([[-1.0] * 3, [1.0] * 3]).repeat(2, 1), atol=1e-4, rtol=0)
    assert torch.equal(vec, vec_before) and torch.equal(image, torch.full_like(image, 200))
    assert set(model.obs_normalizer.stats.keys()) == {"vec"}


def test_unknown_normalize_input_key_names_the_flag():
    with pytest.raises(ValueError, match="--normalize_input_keys"):
        create_actor_critic(VECTOR_SPEC, ActionSpec((2,), 0), cfg(normalize_input=True, normalize_input_keys=["nope"]))


def test_state_dict_round_trip_reproduces_outputs_and_statistics():
    spec = {"a.b": ((7,), np.dtype(np.float32))}
    config = cfg(
        use_rnn=True,
        normalize_input=True,
        normalize_returns=True,
        adaptive_stddev=True,
        actor_critic_share_weights=False,
    )
    torch.manual_seed(3)
    source = create_actor_critic(spec, ActionSpec((3,), 2), config)
    obs = {"a.b": torch.randn(6, 7) * 3 + 1}
    source.normalize_obs(obs, update=True)
    source.returns_normalizer.update(torch.randn(50) * 4)
    torch.manual_seed(4)
    target = builtin_actor_critic(obs_space_from_spec(spec), action_space_from_spec(ActionSpec((3,), 2)), config)
    target.load_state_dict(source.state_dict())
    assert "obs_normalizer.stats.a__b.mean" in source.state_dict()
    h = torch.randn(6, source.rnn_state_size)
    expected, actual = (m.policy_step(m.normalize_obs(obs), h, deterministic=True) for m in (source, target))
    for field in ("actions", "log_prob", "values", "action_logits", "new_rnn_states"):
        torch.testing.assert_close(getattr(actual, field), getattr(expected, field))


def is_orthogonal(w: torch.Tensor, gain: float) -> bool:
    g = w @ w.t() if w.shape[0] <= w.shape[1] else w.t() @ w
    return torch.allclose(g, gain**2 * torch.eye(g.shape[0]), atol=1e-5)


@pytest.mark.parametrize("all_layers", [False, True])
def test_initialization_schemes(all_layers):
    config = dict(encoder_mlp_layers=[32, 16], decoder_mlp_layers=[8], init_all_layers=all_layers)
    ortho = create_actor_critic(VECTOR_SPEC, ActionSpec((3,), 0), cfg(policy_init_gain=1.5, **config))
    encoder = [m for m in ortho.encoders.modules() if isinstance(m, nn.Linear)]
    decoder = [m for m in ortho.decoders.modules() if isinstance(m, nn.Linear)]
    assert is_orthogonal(ortho.action_head.weight, 1.5) and is_orthogonal(ortho.value_head.weight, 1.5)
    for layer in encoder + decoder + [ortho.action_head, ortho.value_head]:
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
    for layer in encoder + decoder:
        if all_layers:
            assert is_orthogonal(layer.weight, 1.5)
        else:  # PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), so not orthogonal
            assert layer.weight.abs().max() <= 1.0 / math.sqrt(layer.in_features)
            assert not is_orthogonal(layer.weight, 1.5)

    xavier = create_actor_critic(
        VECTOR_SPEC, ActionSpec((3,), 0), cfg(policy_initialization="xavier_uniform", **config)
    )
    bound = math.sqrt(6.0 / (xavier.action_head.in_features + xavier.action_head.out_features))
    assert xavier.action_head.weight.abs().max() <= bound
    assert xavier.action_head.weight.abs().max() > 1.0 / math.sqrt(xavier.action_head.in_features)

    torch.manual_seed(11)
    default = create_actor_critic(
        VECTOR_SPEC, ActionSpec((3,), 0), cfg(policy_initialization="torch_default", **config)
    )
    torch.manual_seed(11)
    untouched = create_actor_critic(VECTOR_SPEC, ActionSpec((3,), 0), cfg(**config))
    first = default.encoders[0].encoders[0].mlp[0]
    assert first.bias.abs().max() > 0  # PyTorch's own bias init survives
    if not all_layers:  # same seed, same draws: the encoder weights are PyTorch's in both
        torch.testing.assert_close(first.weight, untouched.encoders[0].encoders[0].mlp[0].weight)
    with pytest.raises(ValueError, match="--policy_initialization"):
        create_actor_critic(VECTOR_SPEC, ActionSpec((3,), 0), cfg(policy_initialization="kaiming"))


def test_bf16_encoder_keeps_float32_outputs_and_gradients_close_to_fp32():
    """--precision=bf16 runs the image encoder in bfloat16; what leaves it, and every weight and gradient, is float32
    and within bfloat16's rounding of the float32 result."""
    torch.manual_seed(0)
    obs = torch.rand(6, *DOOM_SHAPE)
    exact = ConvEncoder("obs", DOOM_SHAPE, cfg(precision="fp32"))
    rounded = ConvEncoder("obs", DOOM_SHAPE, cfg(precision="bf16"))
    rounded.load_state_dict(exact.state_dict())
    out_exact, out_rounded = exact(obs), rounded(obs)
    assert out_rounded.dtype == torch.float32
    assert not torch.equal(out_exact, out_rounded)  # bfloat16 did run
    assert torch.allclose(out_rounded, out_exact, rtol=0.05, atol=0.02)
    out_exact.square().sum().backward()
    out_rounded.square().sum().backward()
    for a, b in zip(exact.parameters(), rounded.parameters()):
        assert b.dtype == torch.float32 and b.grad.dtype == torch.float32
        assert torch.nn.functional.cosine_similarity(a.grad.flatten(), b.grad.flatten(), dim=0) > 0.99


def test_auto_precision_is_float32_with_or_without_amx(monkeypatch):
    """bfloat16 is opt-in: auto resolves to fp32 on every device, and the reason says what the CPU has."""
    from sf.model import precision

    for amx in (True, False):
        monkeypatch.setattr(precision, "amx_available", lambda amx=amx: amx)
        assert precision.resolve_precision("auto", "cpu") == "fp32"
        assert precision.resolve_precision("auto", "cuda") == "fp32"
        assert precision.resolve_precision("bf16", "cuda") == "bf16"
        assert precision.resolve_precision("fp32", "cpu") == "fp32"
        choice = precision.choose_precision("auto", "cpu")
        assert (choice.used, choice.amx) == ("fp32", amx)
        assert ("AMX found" if amx else "no AMX") in choice.reason and "--precision=bf16" in choice.reason
        opted = precision.choose_precision("bf16", "cpu")
        assert opted.used == "bf16" and ("emulated" in opted.reason) == (not amx)
        assert precision.choose_precision("bf16", "cpu", image_encoder=False).used == "fp32"
