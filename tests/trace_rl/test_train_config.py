"""The trainer's config: TOML in, TOML out, and errors that name the key, the value and the fix."""

from __future__ import annotations

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
       name=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=12))
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
    ("rollout.backend=vllm", "vLLM runs on GPUs"),
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
    from tracec.trace_rl.grpo.config import EnvSection
    from tracec.trace_rl.grpo.environments import environment_factory

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
