"""The trainer's config: TOML in, TOML out, and errors that name the key, the value and the fix."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.trace_rl.grpo.config import (
    ConfigError,
    TrainConfig,
    load_config,
    save_config,
)

REPO = Path(__file__).resolve().parents[2]


def test_defaults_follow_trace() -> None:
    config = TrainConfig()
    assert (config.lora.rank, config.lora.alpha, config.lora.dropout) == (16, 16.0, 0.0)
    assert config.lora.targets == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert (config.rollout.group_size, config.rollout.groups_per_batch, config.rollout.temperature) == (16, 4, 1.0)
    assert config.loss.clip_eps == 0.28 and config.loss.aggregation == "sequence_mean"


@settings(max_examples=40, deadline=None)
@given(group_size=st.integers(2, 64), lr=st.floats(1e-7, 0.5), kind=st.sampled_from(["grpo", "trca"]),
       lam=st.none() | st.floats(0, 1), targets=st.lists(st.sampled_from(["q_proj", "v_proj", "up_proj"]),
                                                         min_size=1, max_size=3),
       # a model's name: one beginning with `~` is a folder, made absolute on load (below)
       name=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=12).filter(
           lambda name: not name.startswith("~")))
def test_a_saved_config_reads_back_equal(tmp_path_factory: pytest.TempPathFactory, group_size: int, lr: float,
                                         kind: str, lam: float | None, targets: list[str], name: str) -> None:
    config = load_config(None, [f"rollout.group_size={group_size}", f"optim.lr={lr!r}", f"advantage.kind={kind}",
                                "advantage.rubric=examples/toolenv.rubric",
                                f"lora.targets={targets!r}".replace("'", '"')])
    folder = tmp_path_factory.mktemp("cfg")
    config = config.replace(model=config.model.__class__(name=name), advantage=config.advantage.__class__(
        kind=kind, rubric=str(folder / "r.rubric"), lam=lam))
    path = folder / "config.toml"
    save_config(config, path)
    assert load_config(path) == config


def test_overrides_accept_short_keys_toml_values_and_bare_words() -> None:
    config = load_config(None, ["iterations=1", "lora.targets=['q_proj']", "model.name=tiny", "optim.betas=[0.8, 0.9]"])
    assert config.run.iterations == 1 and config.lora.targets == ("q_proj",) and config.model.name == "tiny"
    assert config.optim.betas == (0.8, 0.9)


def test_a_partial_section_keeps_the_rest_of_its_defaults() -> None:
    assert load_config(None, ["env.max_turns=3"]).env.capability.path == load_config(None).env.capability.path
    assert load_config(None).env.capability.path.endswith("examples/envs/tool_calling_precision.rubric")


@pytest.mark.parametrize(("override", "message"), [
    ("rollout.group_size=1", "--set rollout.group_size=1: error: rollout.group_size = 1: a group needs at least 2"),
    ("rollout.grup_size=3", "unknown key `rollout.grup_size`; did you mean `rollout.group_size`?"),
    ("advantage.kind=trac", 'advantage.kind = "trac": did you mean "trca"?'),
    ("optim.lr=fast", 'optim.lr = "fast": expected a number'),
    ("loss.clip_eps=0", "loss.clip_eps = 0.0: a number in (0, 1); try 0.28"),
    ("loss.dual_clip=1.1", "loss.dual_clip = 1.1: 0 (off) or a number above 1 + clip_eps; try 3.0"),
    ("seed=-2", "run.seed = -2: an integer >= 0"),
    ("advantage.kind=trca", "advantage.rubric = \"\": TRCA scores episodes with a rubric"),
    ("rollout.vllm_gpu_memory=0", "rollout.vllm_gpu_memory = 0.0: a fraction in (0, 1]"),
    ("advantage.step_scale=mean", 'advantage.step_scale = "mean": std or none'),
    ("advantage.oracle=imitate", 'advantage.oracle = "imitate": did you mean "imitation"?'),
    ("nonsense", "write --set KEY=VALUE"),
])
def test_a_bad_override_names_key_value_and_fix(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, [override])
    assert message in str(error.value)


def test_the_imitation_weighted_oracle_asks_for_the_admissible_mode() -> None:
    imitation = ["advantage.kind=oracle", "advantage.oracle=imitation"]
    with pytest.raises(ConfigError, match="only the admissible-command mode keeps"):
        load_config(None, [*imitation, "rollout.action_mode=generate"])
    config = load_config(None, [*imitation, "rollout.action_mode=admissible"])
    assert config.advantage.oracle == "imitation"


def test_an_ambiguous_short_key_lists_the_candidates() -> None:
    with pytest.raises(ConfigError, match="`kind` is ambiguous: write one of env.kind, advantage.kind"):
        load_config(None, ["kind=grpo"])


def test_errors_in_a_file_carry_its_line(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    path.write_text('[model]\nname = "tiny"\n\n[rollout]\ntemperature = 0.5\ngroup_size = 0\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"train\.toml:6:1: error: rollout\.group_size = 0"):
        load_config(path)
    path.write_text('[rollout]\ngroup_size = "many"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r'train\.toml:2:1: error: rollout\.group_size = "many": expected an integer'):
        load_config(path)
    path.write_text("[optim\nlr = 1", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_paths_are_relative_to_the_config_file_and_stored_absolute(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "train.toml"
    path.write_text('[advantage]\nkind = "trca"\nrubric = "../rules.rubric"\n', encoding="utf-8")
    config = load_config(path, ["env.capability.path=envs/x.rubric"])
    assert config.advantage.rubric == str(tmp_path / "rules.rubric")
    assert config.env.capability.path == str(Path.cwd() / "envs" / "x.rubric")  # --set: the working folder's
    save_config(config, tmp_path / "elsewhere.toml")
    assert load_config(tmp_path / "elsewhere.toml") == config


def test_shipped_configs_load(repo_dir: Path) -> None:
    for path in sorted((repo_dir / "examples" / "train").glob("*.toml")):
        config = load_config(path, ["iterations=1"])
        assert config.run.iterations == 1 and config.model.name == "smollm2-135m-instruct"
        for named in (config.env.capability.path if config.env.kind == "capability" else None, config.advantage.rubric):
            assert not named or Path(named).is_file()


def test_textworld_games_are_made_under_the_cache_root(tmp_path, monkeypatch) -> None:
    """$TRACEC_CACHE_DIR moves every rebuildable cache, the made TextWorld games included."""
    from tracec.trace_rl.envs.config import EnvSection
    from tracec.trace_rl.envs.registry import environment_factory

    monkeypatch.setenv("TRACEC_CACHE_DIR", str(tmp_path / "elsewhere"))
    env = environment_factory(EnvSection(kind="textworld"))()
    assert Path(env.cache_dir) == tmp_path / "elsewhere" / "textworld"


def test_a_checkpoint_folder_named_in_a_config_is_found_beside_the_config(tmp_path, monkeypatch) -> None:
    from tracec.trace_rl.grpo.config import load_config

    (tmp_path / "conf" / "ckpt").mkdir(parents=True)
    (tmp_path / "conf" / "ckpt" / "config.json").write_text("{}")
    (tmp_path / "conf" / "train.toml").write_text('[model]\nname = "ckpt"\n')
    monkeypatch.chdir(tmp_path)  # the working folder has no ckpt: the config's folder does
    assert load_config(tmp_path / "conf" / "train.toml").model.name == str(tmp_path / "conf" / "ckpt")
    assert load_config(None, ["model.name=tiny"]).model.name == "tiny"  # a model's name stays a name


def test_a_tilde_of_no_user_is_exit_1_at_its_line_as_in_the_pipeline_s_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rule of `config_io.with_absolute_paths`, which the pipeline's config follows too: the key, the file's line
    or the `--set`, one line, before anything loads."""
    from tracec.cli import main

    path = tmp_path / "train.toml"
    path.write_text('[advantage]\nkind = "trca"\nrubric = "~nosuchuser_x/caps.rubric"\n', encoding="utf-8")
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err == (f'{path}:3:1: error: advantage.rubric = "~nosuchuser_x/caps.rubric": '
                                       "`~nosuchuser_x` names no user of this machine; write the path from `/`, or "
                                       "as a relative path\n")
    path.write_text('[model]\nname = "tiny"\n', encoding="utf-8")
    for item in ("model.name=~nosuchuser_x/ckpt", "env.capability.path=~nosuchuser_x/e.rubric"):
        assert main(["train", str(path), "--set", item, "--out", str(tmp_path / "run")]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"--set {item}: error: {item.partition('=')[0]} = ") and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_model_name_beginning_with_a_tilde_is_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_config(None, ["model.name=~/ckpt"]).model.name == str(tmp_path / "ckpt")


def test_report_to_takes_known_writers_only(tmp_path: Path) -> None:
    path = tmp_path / "train.toml"
    path.write_text('[run]\nreport_to = ["tensorbord"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r'train\.toml:2:1: error: run\.report_to = "tensorbord": did you mean '
                                          r'"tensorboard"\?'):
        load_config(path)
    assert load_config(None, ['run.report_to=["tensorboard"]']).run.report_to == ("tensorboard",)
    assert load_config(None).run.report_to == ()  # off by default


def test_a_temperature_whose_log_probs_overflow_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match=r"rollout\.temperature = 1e-300: a number in \[0\.01, 10\]"):
        load_config(None, ["rollout.temperature=1e-300"])
    assert load_config(None, ["rollout.temperature=0.01"]).rollout.temperature == 0.01


def _checkpoint(folder: Path, config: dict[str, object], tensors: dict[str, list[int]]) -> Path:
    """A checkpoint folder as far as the load-time checks read it: config.json, a tokenizer file and a safetensors
    file whose header holds `tensors` (name -> shape; no data follows, as no check reads any)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    header = json.dumps({name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}
                         for name, shape in tensors.items()}).encode()
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return folder


LAYER = {"model.embed_tokens.weight": [8, 4], "model.layers.0.self_attn.q_proj.weight": [4, 4],
         "model.layers.0.input_layernorm.weight": [4]}


def test_lora_targets_are_matched_against_the_checkpoints_layers_at_load(tmp_path: Path) -> None:
    from tracec.trace_rl.grpo.preflight import check_located

    model = _checkpoint(tmp_path / "ckpt", {"model_type": "llama", "tie_word_embeddings": True}, LAYER)
    run = [f"model.name={model}", f"env.capability.path={REPO / 'examples/envs/tool_calling_precision.rubric'}"]
    # peft's rule: a full name or its last dotted parts; a tied output layer has no tensor of its own, yet is there
    fits = [*run, 'lora.targets=["self_attn.q_proj", "lm_head"]']
    check_located(load_config(None, fits), None, fits)
    with pytest.raises(ConfigError, match=r'^--set lora\.targets=\["input_layernorm"\]: error: lora\.targets = '
                                          r'\["input_layernorm"\]: the model ".*ckpt" has no module named '
                                          r"input_layernorm; LoRA can adapt its layers named embed_tokens, q_proj, "
                                          r"lm_head \(full names like model\.layers\.0\.self_attn\.q_proj\)"):
        norm = [*run, 'lora.targets=["input_layernorm"]']  # a norm: no matrix to adapt
        check_located(load_config(None, norm), None, norm)


@pytest.mark.parametrize(("files", "says"), [
    ({"config.json": "{}"}, r'/config\.json names no "model_type"'),
    ({"config.json": "{"}, r"/config\.json cannot be read as JSON"),
    ({"config.json": '{"model_type": "llama"}', "tokenizer.json": "{}"}, r"holds no weights"),
    ({"config.json": '{"model_type": "llama"}', "model.safetensors": ""}, r"holds no tokenizer"),
])
def test_a_checkpoint_folder_missing_a_part_is_named_with_the_part(tmp_path: Path, files: dict[str, str],
                                                                    says: str) -> None:
    from tracec.trace_rl.policy.catalog import ModelError, check_checkpoint

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ModelError, match=rf"^{re.escape(str(tmp_path))}.*{says}"):
        check_checkpoint(tmp_path)


def test_the_tiny_models_layers_are_known_without_building_it() -> None:
    import torch
    from tracec.trace_rl.policy.tiny import build_tiny_model
    from tracec.trace_rl.policy.tiny_vocab import tiny_modules

    model, _ = build_tiny_model(0)
    matrices = [name for name, module in model.named_modules()
                if isinstance(getattr(module, "weight", None), torch.Tensor) and module.weight.dim() == 2]
    assert list(tiny_modules()) == matrices


def test_a_policy_refuses_lora_targets_its_model_lacks_with_a_config_error() -> None:
    """The trainer's own check (a config built in code skips the load-time one): no peft traceback."""
    from tracec.trace_rl.policy.lora import LoraSection
    from tracec.trace_rl.policy.model import Policy

    with pytest.raises(ConfigError, match=r'^lora\.targets = \["nope_proj"\]: the model "tiny" has no module named '
                                          r"nope_proj; LoRA can adapt its layers named embed_tokens, q_proj"):
        Policy.load("tiny", LoraSection(targets=("nope_proj",)))


def test_a_textworld_game_is_told_by_its_header_and_its_facts(tmp_path: Path) -> None:
    from tracec.trace_rl.envs.textworld.game_file import game_file_problem

    game = tmp_path / "game.z8"
    game.write_bytes(bytes([8]) + bytes(63))  # a Z-machine version 8 header
    assert game_file_problem(game) == "a game without its game.json beside it (`tw-make` writes the game's facts " \
        "there, and TextWorld reads them with the game)"
    (tmp_path / "game.json").write_text("{}")
    assert game_file_problem(game) is None
    game.write_text("not a game\n")
    assert game_file_problem(game).startswith("not a TextWorld game")  # type: ignore[union-attr]
    assert game_file_problem(tmp_path) == "is a folder, not a game file"
    assert game_file_problem(tmp_path / "none.z8").startswith("no such game file")  # type: ignore[union-attr]


def test_a_python_factory_built_in_code_is_checked_as_the_trainer_makes_it() -> None:
    """`environment_factory` (what `train` uses without `make_env`) says the factory's mistake as a ConfigError."""
    from tracec.trace_rl.envs.config import EnvSection, PythonEnvSection
    from tracec.trace_rl.envs.registry import environment_factory

    with pytest.raises(ConfigError, match=r'^env\.python\.factory = "json:loads": loads cannot be called with no '
                                          r"arguments"):
        environment_factory(EnvSection(kind="python", python=PythonEnvSection(factory="json:loads")))
    make = environment_factory(EnvSection(kind="python", python=PythonEnvSection(factory="os:getcwd")))
    with pytest.raises(ConfigError, match=r'^env\.python\.factory = "os:getcwd": getcwd\(\) made a str, not an '
                                          r"environment \(it has no system_prompt, reset, step, trajectory"):
        make()


@pytest.mark.parametrize("factory", ["toy_env:letter_env", "toy_env:bare_letter_env"])
def test_the_admissible_mode_is_refused_for_a_python_environment_that_lists_no_commands(factory: str) -> None:
    """Told before any model loads, whether the class inherits the protocol's default (None) or a factory's object
    that does not subclass it lacks `admissible_commands` altogether."""
    from tracec.trace_rl.grpo.preflight import check_inputs

    from tracec.config_io import FieldError

    config = load_config(None, ["model.name=tiny", "env.kind=python", f"env.python.factory={factory}",
                                "rollout.action_mode=admissible"])
    with pytest.raises(FieldError, match=rf'^rollout\.action_mode = "admissible": .*env\.python\.factory = '
                                         rf'"{factory}" lists none \(`admissible_commands`\)'):
        check_inputs(config)
