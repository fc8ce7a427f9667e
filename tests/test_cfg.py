import argparse
import json
from pathlib import Path

import pytest

import sf.cfg.arguments as arguments
from sf.cfg.arguments import (
    PRESETS_DIR,
    cfg_to_dict,
    default_cfg,
    load_cfg_json,
    main_cfg_or_exit,
    make_parser,
    parse_full_cfg,
    resolve_device,
)
from sf.cfg.validate import validate_cfg
from sf.utils.errors import ConfigError

# the profiling guide's Doom command line, as users copy it
DOOM_COMMAND = """--env=doom_benchmark --env_frameskip=4 --train_for_env_steps=4000000 --use_rnn=True \
--num_workers=12 --num_envs_per_worker=16 --num_policies=1 --num_epochs=1 --rollout=32 --recurrence=32 \
--batch_size=2048 --experiment=profiling --benchmark=True --decorrelate_envs_on_one_worker=False --res_w=128 \
--res_h=72 --wide_aspect_ratio=True --policy_workers_per_policy=1 --worker_num_splits=2 --batched_sampling=False \
--serial_mode=False --async_rl=True --policy_workers_per_policy=1"""


def add_doom_like_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--res_w", type=int, default=128)
    parser.add_argument("--res_h", type=int, default=72)
    parser.add_argument("--wide_aspect_ratio", type=arguments.str2bool, nargs="?", const=True, default=False)


def parse(*argv: str, **kwargs) -> argparse.Namespace:
    return parse_full_cfg(["--env=test_env", *argv], **kwargs)


def error_of(*argv: str, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(*argv, **kwargs)
    return info.value


@pytest.fixture
def yaml_file(tmp_path: Path):
    def write(text: str) -> Path:
        path = tmp_path / "preset.yaml"
        path.write_text(text)
        return path

    return write


# --- command-line errors -----------------------------------------------------------------------------


def test_unknown_flag_suggests_the_closest_one():
    err = error_of("--rolout=64")
    assert str(err) == "unknown flag --rolout; did you mean --rollout?"
    assert err.flag == "--rolout"


def test_unknown_flag_with_separate_value_is_reported_by_name():
    assert "unknown flag --learning_rat;" in str(error_of("--learning_rat", "0.1"))


def test_bad_choice_lists_the_allowed_values():
    err = error_of("--device=tpu")
    assert str(err) == "--device: invalid choice 'tpu' (choose from cpu, gpu, auto)"
    assert err.flag == "--device"


def test_bad_float_and_int_name_the_flag():
    assert str(error_of("--gamma", "abc")) == "--gamma: expected a float, got 'abc'"
    assert str(error_of("--rollout=3.5")) == "--rollout: expected an integer, got '3.5'"


def test_bad_bool_names_the_flag():
    err = error_of("--use_rnn=maybe")
    assert err.flag == "--use_rnn" and "'maybe'" in str(err)


def test_missing_env_is_an_error():
    with pytest.raises(ConfigError, match="--env is required"):
        parse_full_cfg(["--rollout=64"])


def test_missing_env_is_an_error_in_evaluation_mode_too():
    with pytest.raises(ConfigError, match="--env is required"):
        parse_full_cfg([], evaluation=True)


def test_main_cfg_or_exit_prints_the_error_and_exits_with_status_2(capsys):
    with pytest.raises(SystemExit) as info:
        main_cfg_or_exit(["--env=x", "--device=tpu"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == "sf: error: --device: invalid choice 'tpu' (choose from cpu, gpu, auto)"


# --- value syntax ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected", [("True", True), ("false", False), ("1", True), ("0", False), ("yes", True), ("NO", False)]
)
def test_booleans_accept_the_usual_spellings(text: str, expected: bool):
    assert parse(f"--with_vtrace={text}").with_vtrace is expected
    assert parse("--with_vtrace", text).with_vtrace is expected


def test_bare_boolean_flag_means_true():
    cfg = parse("--with_vtrace", "--rollout=64")
    assert cfg.with_vtrace is True and cfg.rollout == 64


def test_list_flags_take_several_ints_and_repeated_flags_keep_the_last():
    cfg = parse("--encoder_mlp_layers", "64", "32", "--rollout=16", "--rollout=64")
    assert cfg.encoder_mlp_layers == [64, 32]
    assert cfg.rollout == 64
    assert parse("--decoder_mlp_layers").decoder_mlp_layers == []


def test_integers_may_be_written_in_scientific_notation():
    assert parse("--train_for_env_steps=1e7").train_for_env_steps == 10_000_000


def test_cli_args_holds_exactly_the_flags_given_on_the_command_line(yaml_file):
    path = yaml_file("gamma: 0.9\n")
    cfg = parse(f"--cfg={path}", "--use_rnn=False", "--encoder_mlp_layers", "8", "8")
    assert cfg.cli_args == {"env": "test_env", "cfg": str(path), "use_rnn": False, "encoder_mlp_layers": [8, 8]}


# --- layering: parser defaults < script defaults < YAML < command line ------------------------------


def test_yaml_overrides_script_defaults_and_parser_defaults(yaml_file):
    path = yaml_file("learning_rate: 3.0e-4\nencoder_mlp_layers: [64, 64]\nuse_rnn: false\n")
    cfg = parse(f"--cfg={path}", defaults={"learning_rate": 1e-3, "gamma": 0.9})
    assert cfg.learning_rate == 3e-4
    assert cfg.encoder_mlp_layers == [64, 64]
    assert cfg.use_rnn is False
    assert cfg.gamma == 0.9  # the script default still beats the parser default
    assert cfg.rollout == 32  # untouched flags keep the parser default


def test_command_line_overrides_yaml(yaml_file):
    path = yaml_file("learning_rate: 3.0e-4\nrollout: 16\n")
    cfg = parse(f"--cfg={path}", "--learning_rate=0.01")
    assert cfg.learning_rate == 0.01
    assert cfg.rollout == 16


def test_yaml_values_go_through_the_flag_parsers(yaml_file):
    path = yaml_file('with_vtrace: "yes"\nlearning_rate: 1e-4\ntrain_for_env_steps: 1.0e+6\n')
    cfg = parse(f"--cfg={path}")
    assert cfg.with_vtrace is True
    assert cfg.learning_rate == 1e-4
    assert cfg.train_for_env_steps == 1_000_000 and isinstance(cfg.train_for_env_steps, int)


def test_unknown_yaml_key_is_named_with_a_suggestion(yaml_file):
    path = yaml_file("rolout: 64\n")
    err = error_of(f"--cfg={path}")
    assert "unknown flag 'rolout'" in str(err) and "did you mean 'rollout'" in str(err)


def test_bad_yaml_value_names_the_flag_and_the_file(yaml_file):
    path = yaml_file("device: tpu\n")
    err = error_of(f"--cfg={path}")
    assert err.flag == "--device" and str(path) in str(err)


def test_missing_yaml_file_is_an_error():
    assert error_of("--cfg=does_not_exist.yaml").flag == "--cfg"


def test_missing_preset_lists_every_preset_also_those_in_subfolders():
    message = str(error_of("--cfg=nosuch"))
    listed = message.split("(presets: ")[1].rstrip(")").split(", ")
    assert listed == sorted(p.relative_to(PRESETS_DIR).with_suffix("").as_posix() for p in PRESETS_DIR.rglob("*.yaml"))
    assert {"appo_default", "profile/torch_learner"} <= set(listed)


def test_callable_defaults_receive_the_env_name_from_yaml(yaml_file):
    seen = []

    def defaults(env: str) -> dict:
        seen.append(env)
        return {"rollout": 64}

    path = yaml_file("env: FromYaml-v0\n")
    cfg = parse_full_cfg([f"--cfg={path}"], defaults=defaults)
    assert seen == ["FromYaml-v0"]
    assert cfg.env == "FromYaml-v0" and cfg.rollout == 64


def test_an_env_rejected_by_the_defaults_is_reported_against_env():
    def defaults(env: str) -> dict:
        raise ValueError(f"{env!r} is not a known env")

    assert error_of(defaults=defaults).flag == "--env"


@pytest.mark.parametrize("preset", sorted(PRESETS_DIR.glob("*.yaml")), ids=lambda path: path.stem)
def test_every_preset_parses(preset: Path):
    cfg = parse(f"--cfg={preset}")
    assert cfg.cfg == str(preset)


def test_presets_can_be_named_without_path_or_suffix():
    cfg = parse_full_cfg(["--cfg=cartpole_serial"])
    assert cfg.env == "CartPole-v1" and cfg.serial_mode is True and cfg.encoder_mlp_layers == [64, 64]


# --- resolution and validation -----------------------------------------------------------------------


def test_serial_mode_turns_off_async_rl_given_only_by_default():
    cfg = parse("--serial_mode=True")
    assert cfg.serial_mode is True and cfg.async_rl is False


@pytest.mark.parametrize("source", ["cli", "yaml"])
def test_serial_mode_with_explicit_async_rl_is_an_error_naming_both(source: str, yaml_file):
    argv = ["--async_rl=True"] if source == "cli" else [f"--cfg={yaml_file('async_rl: true')}"]
    err = error_of("--serial_mode=True", *argv)
    assert "--async_rl" in str(err) and "--serial_mode" in str(err)


def test_recurrence_minus_one_follows_use_rnn():
    assert parse("--rollout=64", "--use_rnn=True").recurrence == 64
    assert parse("--rollout=64", "--use_rnn=False").recurrence == 1
    assert parse("--rollout=64", "--recurrence=16").recurrence == 16


def test_recurrence_longer_than_rollout_is_an_error():
    err = error_of("--rollout=32", "--recurrence=64")
    assert err.flag == "--recurrence" and "--rollout" in str(err)


def test_recurrence_must_divide_rollout_with_an_rnn():
    assert error_of("--rollout=32", "--recurrence=12", "--use_rnn=True").flag == "--recurrence"


def test_batch_size_must_be_a_multiple_of_rollout():
    err = error_of("--rollout=32", "--batch_size=1000")
    assert err.flag == "--batch_size" and "multiple of --rollout" in str(err)


@pytest.mark.parametrize(
    "flag, value, allowed",
    [
        ("gamma", 1.5, "(0, 1]"),
        ("gae_lambda", -0.1, "[0, 1]"),
        ("learning_rate", 0.0, "> 0"),
        ("num_workers", 0, ">= 1"),
        ("max_policy_lag", -1, ">= 0"),
    ],
)
def test_out_of_range_values_name_the_flag_and_the_allowed_range(flag: str, value, allowed: str):
    err = error_of(f"--{flag}={value}")
    assert err.flag == f"--{flag}" and allowed in str(err)


def test_envs_per_worker_must_split_evenly():
    assert error_of("--num_envs_per_worker=3", "--worker_num_splits=2").flag == "--num_envs_per_worker"


def test_validate_cfg_rejects_serial_async_on_an_unresolved_namespace():
    cfg = default_cfg()
    cfg.serial_mode, cfg.async_rl = True, True
    with pytest.raises(ConfigError):
        validate_cfg(cfg)


def test_reference_doom_command_parses_with_the_example_flags():
    cfg = parse_full_cfg(DOOM_COMMAND.split(), add_args=add_doom_like_args)
    assert (cfg.env, cfg.env_frameskip, cfg.num_workers, cfg.num_envs_per_worker) == ("doom_benchmark", 4, 12, 16)
    assert (cfg.res_w, cfg.res_h, cfg.wide_aspect_ratio) == (128, 72, True)
    assert cfg.recurrence == 32 and cfg.batch_size == 2048 and cfg.benchmark is True
    assert cfg.decorrelate_envs_on_one_worker is False and cfg.async_rl is True


def test_example_flags_are_unknown_without_add_args():
    assert "--res_w" in str(error_of("--res_w=128"))


def test_evaluation_flags_exist_only_in_evaluation_mode():
    cfg = parse("--max_num_episodes=3", "--save_video", evaluation=True)
    assert cfg.max_num_episodes == 3 and cfg.save_video is True and cfg.video_frames == 1_000_000_000
    assert error_of("--save_video").flag == "--save_video"


# --- library helpers ---------------------------------------------------------------------------------


def test_default_cfg_applies_overrides_resolution_and_validation():
    cfg = default_cfg(use_rnn=False, serial_mode=True, rollout=16)
    assert (cfg.recurrence, cfg.async_rl, cfg.rollout, cfg.env) == (1, False, 16, None)
    with pytest.raises(ConfigError, match="rolout"):
        default_cfg(rolout=16)
    with pytest.raises(ConfigError, match="--batch_size"):
        default_cfg(batch_size=100)


def test_config_dict_is_json_ready_and_loads_back(tmp_path: Path):
    cfg = parse("--encoder_mlp_layers", "64", "64", "--seed=3")
    cfg.experiment_dir = tmp_path  # a non-JSON value set by library code is stored as text
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg_to_dict(cfg)))
    loaded = load_cfg_json(path)
    assert loaded.encoder_mlp_layers == [64, 64] and loaded.seed == 3 and loaded.env == "test_env"
    assert loaded.cli_args == cfg.cli_args
    assert loaded.experiment_dir == str(tmp_path)


def test_load_cfg_json_fills_flags_missing_from_older_configs(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"env": "old_env", "rollout": 8}))
    loaded = load_cfg_json(path)
    assert loaded.rollout == 8 and loaded.gamma == 0.99 and loaded.cli_args == {}


def test_make_parser_keeps_abbreviations_off():
    with pytest.raises(ConfigError):
        make_parser().parse_args(["--learning=0.1"])


@pytest.mark.parametrize(
    "device, cuda, expected",
    [
        ("cpu", True, "cpu"),
        ("gpu", True, "cuda"),
        ("auto", True, "cuda"),
        ("gpu", False, "cpu"),
        ("auto", False, "cpu"),
    ],
)
def test_resolve_device(monkeypatch, device: str, cuda: bool, expected: str):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device(parse(f"--device={device}")) == expected


def test_yaml_null_keeps_the_default(tmp_path):
    from sf.cfg.arguments import parse_full_cfg

    preset = tmp_path / "p.yaml"
    preset.write_text("seed: null\nrollout: null\ngamma: 0.9\n")
    cfg = parse_full_cfg(["--env=CartPole-v1", f"--cfg={preset}"])
    assert cfg.seed is None and cfg.rollout == 32 and cfg.gamma == 0.9


@pytest.mark.parametrize("extra, expected", [([], 4), (["--eval_env_frameskip=1"], 1)])
def test_evaluation_uses_the_saved_config_and_eval_env_frameskip(tmp_path, extra: list[str], expected: int):
    from sf.enjoy import merged_cfg

    trained = parse_full_cfg(["--env=CartPole-v1", "--env_frameskip=4", "--gamma=0.9"])
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "config.json").write_text(json.dumps(cfg_to_dict(trained)))
    cli = parse_full_cfg(["--env=CartPole-v1", "--experiment=exp", f"--train_dir={tmp_path}", *extra], evaluation=True)
    cfg = merged_cfg(cli)
    assert cfg.env_frameskip == expected and cfg.gamma == 0.9
