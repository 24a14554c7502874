"""TextWorld target environment: game making and its cache, canonical facts, agents, trajectory JSONL.

Tests that play a real game share one `tw-simple` game made once per session (a few seconds) and are marked slow;
the parsing, fact-derivation and error-path tests run without a game (the generator's calls stood in for).
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest
import re2
import textworld.challenges
import textworld.generator
from hypothesis import given
from hypothesis import strategies as st
from textworld.logic import Proposition, Variable
from tracec.dsl import ast
from tracec.dsl.check import check_source
from tracec.runtime.facts.trajectories.records import write_records
from tracec.trace_rl.envs.agent import ChatAgent, run_episode
from tracec.trace_rl.envs.textworld.agents import RandomAgent, WalkthroughAgent
from tracec.trace_rl.envs.textworld.env import (
    CookingGame,
    CustomGame,
    GameMakeError,
    SimpleGame,
    TextWorldEnvironment,
    game_path,
    make_game,
)
from tracec.trace_rl.envs.textworld.facts import (
    VERBS,
    clean_feedback,
    extract_command,
    parse_command,
    state_facts,
)

SPEC = SimpleGame(seed=2)
RUBRIC = Path(__file__).parents[2] / "examples" / "textworld.rubric"


@pytest.fixture
def game(textworld_game: Path) -> Path:
    return textworld_game


@pytest.fixture
def env(game: Path):
    with TextWorldEnvironment(game) as opened:
        yield opened


def _fake_compile(game: object, options: textworld.GameOptions) -> str:
    """Stands in for Inform 7: writes the two files of a game, holding the options it was asked for."""
    Path(options.path).write_text(json.dumps({"seeds": options.seeds, "rooms": options.nb_rooms}))
    Path(options.path).with_suffix(".json").write_text("{}")
    return str(options.path)


def _refuse(*args: object, **kwargs: object) -> None:
    raise textworld.generator.QuestGenerationError("no quest fits")


def _carried(inventory: str) -> set[str]:
    """Names in TextWorld's own inventory text: 'You are carrying: a lettuce and an old key.'"""
    if ":" not in inventory:
        return set()
    body = inventory.split(":", 1)[1].strip().rstrip(".")
    return {
        re.sub(r"^(?:a|an|some|the) ", "", part.strip())
        for part in re.split(r",| and ", body)
        if part.strip()
    }


# ---------------------------------------------------------------- commands and feedback


@pytest.mark.parametrize(
    ("command", "verb", "obj", "recep"),
    [
        ("go east", "go", "east", None),
        ("north", "go", "north", None),
        ("take old key from chest drawer", "take", "old key", "chest drawer"),
        ("Take the red apple.", "take", "red apple", None),
        ("put lettuce on stove", "put", "lettuce", "stove"),
        ("insert old key into antique trunk", "insert", "old key", "antique trunk"),
        ("unlock wooden door with old key", "unlock", "wooden door", "old key"),
        ("cook red potato with stove", "cook", "red potato", "stove"),
        ("dice pork chop with knife", "dice", "pork chop", "knife"),
        ("prepare meal", "prepare", "meal", None),
        ("inventory", "inventory", None, None),
        ("x  cookbook", "examine", "cookbook", None),
    ],
)
def test_parse_command_templates(command: str, verb: str, obj: str | None, recep: str | None) -> None:
    parsed = parse_command(command)
    assert (parsed.verb, parsed.obj, parsed.recep, parsed.parsed) == (verb, obj, recep, True)


@pytest.mark.parametrize(
    ("command", "verb"), [("dance wildly", "other"), ("take", "take"), ("unlock door", "unlock")]
)
def test_parse_command_rejects_incomplete(command: str, verb: str) -> None:
    parsed = parse_command(command)
    assert (parsed.verb, parsed.parsed, parsed.obj) == (verb, False, None)


_WORD = st.text(alphabet=string.ascii_lowercase, min_size=2, max_size=8).filter(
    lambda w: w not in {"from", "on", "in", "into", "with", "the", "an", "some"}
)
_NAME = st.lists(_WORD, min_size=1, max_size=3).map(" ".join)


@given(verb=st.sampled_from(["unlock", "lock", "cook", "slice", "chop", "dice"]), obj=_NAME, tool=_NAME)
def test_parse_command_splits_two_argument_templates(verb: str, obj: str, tool: str) -> None:
    parsed = parse_command(f"{verb} {obj} with {tool}")
    assert (parsed.verb, parsed.obj, parsed.recep) == (verb, obj, tool)
    assert parsed.verb in VERBS


@given(
    command=st.text(alphabet=string.ascii_letters + " -'", min_size=1).filter(str.strip), chatter=st.text()
)
def test_extract_command_prefers_action_tag(command: str, chatter: str) -> None:
    assert extract_command(f"{chatter.replace('<', '')}\n<action>{command}</action>\nbye") == command.strip()
    assert extract_command(f"\n  {command}\nmore lines") == command.strip()


@given(st.text(max_size=300))
def test_extracted_commands_never_carry_what_crashes_the_game(reply: str) -> None:
    command = extract_command(reply)
    assert not re.search(r"[\\\x00-\x1f\x7f]", command)
    assert len(command.encode()) <= 190 and command == command.strip()


@pytest.mark.slow
def test_hostile_commands_are_played_safely(env: TextWorldEnvironment) -> None:
    env.reset(0)
    for reply in ("x\\D", "<action>look\x00</action>", "\\quit", "a" * 5000):
        result = env.step(reply)
        assert result.action["parsed"] in (True, False) and not result.done
    assert env.step("look").action["verb"] == "look"


def test_clean_feedback_drops_prompt_and_status_line() -> None:
    raw = "\nThe table is solidly built.\n\n\n\n>                        -= Spare Room =-0/3"
    assert clean_feedback(raw) == "The table is solidly built."
    assert clean_feedback(None) == ""


# ---------------------------------------------------------------- facts from propositions


def _fact(name: str, *args: tuple[str, str]) -> Proposition:
    return Proposition(name, [Variable(n, t) for n, t in args])


def test_state_facts_derive_location_holding_and_visibility() -> None:
    facts = [
        _fact("at", ("P", "P"), ("Kitchen", "r")),
        _fact("at", ("fridge", "c"), ("Kitchen", "r")),
        _fact("at", ("table", "s"), ("Kitchen", "r")),
        _fact("at", ("bed", "s"), ("bedroom", "r")),
        _fact("in", ("milk", "f"), ("fridge", "c")),  # hidden: the fridge is closed
        _fact("on", ("tray", "c"), ("table", "s")),
        _fact("in", ("Red Apple", "f"), ("tray", "c")),  # visible: open tray on a supporter
        _fact("on", ("pillow", "o"), ("bed", "s")),  # another room
        _fact("in", ("knife", "o"), ("I", "I")),
        _fact("in", ("ingredient_0", "ingredient"), ("RECIPE", "RECIPE")),
        _fact("link", ("Kitchen", "r"), ("wooden door", "d"), ("bedroom", "r")),
        _fact("closed", ("fridge", "c")),
        _fact("locked", ("wooden door", "d")),
        _fact("open", ("tray", "c")),
    ]
    state = state_facts(
        {"facts": facts, "score": 2, "feedback": "Hi.\n\n>  -= Kitchen =-2/5", "won": False, "lost": False}
    )
    assert state["location"] == "kitchen"
    assert state["holding"] == ["knife"]
    assert state["visible"] == ["fridge", "red apple", "table", "tray", "wooden door"]
    assert state["opened"] == ["tray"]
    assert state["closed"] == ["fridge", "wooden door"]
    assert (state["score"], state["feedback"], state["won"], state["lost"]) == (2, "Hi.", False, False)
    json.dumps(state)  # JSON as is


def test_state_facts_without_player_fact_leave_location_missing() -> None:
    state = state_facts({"facts": [], "score": None, "feedback": None, "won": False, "lost": False})
    assert "location" not in state and state["visible"] == [] and state["score"] == 0


# ---------------------------------------------------------------- game making


def test_game_specs_validate() -> None:
    with pytest.raises(ValueError, match="world_size=0"):
        CustomGame(world_size=0)
    with pytest.raises(ValueError, match="world_size=3"):
        CookingGame(world_size=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="take=2"):
        CookingGame(recipe=1, take=2)
    with pytest.raises(ValueError, match="rewards"):
        SimpleGame(rewards="often")  # type: ignore[arg-type]
    assert CookingGame(skills=("cut", "open")).tw_make_args()[-4:] == ["--cut", "--open", "--seed", "0"]


def test_make_game_reports_a_generator_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textworld.generator, "make_game", _refuse)
    with pytest.raises(GameMakeError, match=r"CustomGame\(seed=5.*no quest fits"):
        make_game(CustomGame(seed=5), tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # no half-made game left behind


def test_make_game_keys_the_cache_by_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textworld.generator, "make_game", lambda options: options)
    monkeypatch.setattr(textworld.generator, "compile_game", _fake_compile)
    first = make_game(CustomGame(seed=1, world_size=4), tmp_path / "cache")
    other = make_game(CustomGame(seed=2, world_size=4), tmp_path / "cache")
    asked = [json.loads(path.read_text()) for path in (first, other)]
    assert first != other and asked[0]["seeds"] != asked[1]["seeds"] and asked[0]["rooms"] == 4
    assert first == game_path(CustomGame(seed=1, world_size=4), tmp_path / "cache")
    monkeypatch.setattr(textworld.generator, "make_game", _refuse)  # a second request never makes it again
    assert make_game(CustomGame(seed=1, world_size=4), tmp_path / "cache") == first


def test_a_challenge_gets_its_settings_as_tw_make_parses_them(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    description, _, add_arguments = textworld.challenges.CHALLENGES["tw-cooking"]
    monkeypatch.setitem(textworld.challenges.CHALLENGES, "tw-cooking",
                        (description, lambda settings, options: asked.append(settings), add_arguments))
    monkeypatch.setattr(textworld.generator, "compile_game", _fake_compile)
    make_game(CookingGame(seed=7, recipe=2, take=1, skills=("cut",)), tmp_path / "cache")
    assert asked == [{"recipe": 2, "take": 1, "go": 1, "open": False, "cook": False, "cut": True, "drop": False,
                      "recipe_seed": 0, "split": None, "seed": 7}]


@pytest.mark.slow
def test_a_made_game_is_the_one_tw_make_makes(tmp_path: Path) -> None:
    spec = CustomGame(seed=1)
    made = make_game(spec, tmp_path / "cache")
    command = [sys.executable, str(Path(sys.executable).with_name("tw-make")), *spec.tw_make_args(),
               "--output", str(tmp_path / "tw-make" / "game.z8"), "-f", "--silent"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)

    def game(path: Path) -> tuple[object, ...]:  # what a player meets; some lists are sets, in hash order
        record = json.loads(path.with_suffix(".json").read_text())
        return (sorted(json.dumps(fact, sort_keys=True) for fact in record["world"]), record["infos"],
                record["objective"], record["metadata"]["walkthrough"])

    assert game(made) == game(tmp_path / "tw-make" / "game.z8")


# ---------------------------------------------------------------- playing a real game


@pytest.mark.slow
def test_a_made_game_is_cached(game: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert game.suffix == ".z8" and game.with_suffix(".json").is_file()
    monkeypatch.setitem(textworld.challenges.CHALLENGES, SPEC.challenge, (None, _refuse, None))
    assert make_game(SPEC, game.parent.parent) == game


@pytest.mark.slow
def test_walkthrough_wins_and_facts_match_textworld(env: TextWorldEnvironment) -> None:
    trajectory = run_episode(env, WalkthroughAgent(env), 0, 50, episode="w0")
    assert trajectory["success"] is True and trajectory["env_reward"] == 1.0
    assert trajectory["states"][-1]["won"] is True
    assert all(action["admissible"] and action["parsed"] for action in trajectory["actions"])
    assert (
        sum(action["score_delta"] for action in trajectory["actions"])
        == trajectory["states"][-1]["score"]
        > 0
    )
    # Replay and compare every state with TextWorld's own text: the room header, the inventory, the description.
    env.reset(0)
    state = env.states[0]
    for action in [None, *trajectory["actions"]]:
        if action is not None:
            state = env.step(action["text"]).state
        description, inventory = env.game_state["description"], env.game_state["inventory"]
        room = re.match(r"-= (.+?) =-", description)
        assert room is not None and state["location"] == room.group(1).lower()
        assert set(state["holding"]) == _carried(inventory)
        assert all(name in description.lower() for name in state["visible"])


@pytest.mark.slow
def test_closed_containers_hide_their_contents(env: TextWorldEnvironment) -> None:
    env.reset(0)
    state = env.states[0]
    hidden = [
        fact.arguments[0].name.lower()
        for fact in env.game_state["facts"]
        if fact.name == "in" and fact.arguments[1].name.lower() in state["closed"]
    ]
    assert hidden and not set(hidden) & set(state["visible"])


@pytest.mark.slow
def test_random_agent_is_seeded_and_hits_invalidity_like_steps(env: TextWorldEnvironment) -> None:
    agent = RandomAgent(env, seed=7)
    first = run_episode(env, agent, 0, 25, episode="r0")
    again = run_episode(env, agent, 0, 25, episode="r0")
    assert first == again
    assert run_episode(env, RandomAgent(env, seed=8), 0, 25, episode="r0") != first
    assert all(action["admissible"] for action in first["actions"])
    assert any(action["score_delta"] == 0 for action in first["actions"])
    assert first["success"] is (first["env_reward"] == 1.0)
    env.reset(0)
    result = env.step("take unicorn")
    state, action = result.state, result.action
    assert action["parsed"] and not action["admissible"] and action["score_delta"] == 0
    assert "can't see any such" in state["feedback"] and "can't see any such" in result.observation.text
    action = env.step("<action>dance wildly</action>").action
    assert (action["verb"], action["parsed"], action["admissible"]) == ("other", False, False)


class _ScriptedBackend:
    def __init__(self, commands: list[str]) -> None:
        self.commands = list(commands)
        self.calls: list[list[dict[str, str]]] = []

    def generate(self, messages: list[dict[str, str]]) -> str:
        self.calls.append(messages)
        return f"Thinking about it.\n<action>{self.commands[len(self.calls) - 1]}</action>"


@pytest.mark.slow
def test_llm_agent_plays_from_action_tags(env: TextWorldEnvironment) -> None:
    first = env.reset(0).text
    plan, objective = env.policy_commands, env.objective
    backend = _ScriptedBackend(list(plan))
    trajectory = run_episode(env, ChatAgent(backend, history_turns=2), 0, 50, episode="l0")
    assert trajectory["success"] is True and len(backend.calls) == len(plan) > 3
    assert trajectory["actions"][0]["text"].startswith("Thinking about it.\n<action>")
    assert trajectory["actions"][0]["verb"] == parse_command(plan[0]).verb
    for turn, messages in enumerate(backend.calls):
        # The system prompt, the first observation (it states the objective), then the last two turns.
        assert messages[0] == {"role": "system", "content": env.system_prompt}
        assert messages[1] == {"role": "user", "content": first} and objective in first
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * min(turn, 2) + ["user"]
        assert len(messages) == 2 + 2 * min(turn, 2)
        if turn > 2:
            assert messages[-2]["content"] == f"Thinking about it.\n<action>{plan[turn - 1]}</action>"


@pytest.mark.slow
def test_trajectory_jsonl_shape_and_round_trip(env: TextWorldEnvironment, tmp_path: Path) -> None:
    episodes = [
        run_episode(env, WalkthroughAgent(env), 0, 50, episode="w0"),
        run_episode(env, RandomAgent(env, seed=1), 0, 10, episode="r1"),
    ]
    path = tmp_path / "textworld.jsonl"
    write_records(episodes, path)
    assert [json.loads(line) for line in path.read_text().splitlines()] == episodes
    assert [p.name for p in tmp_path.iterdir()] == ["textworld.jsonl"]  # no staging file left
    for line, episode in zip(path.read_text().splitlines(), episodes, strict=True):
        record = json.loads(line)
        assert set(record) == {"episode", "task", "instruction", "states", "actions", "env_reward", "success"}
        assert len(record["states"]) == len(record["actions"]) + 1
        assert record["instruction"] == episode["instruction"] and record["task"].startswith("tw-simple")
        assert 0.0 <= record["env_reward"] <= 1.0
        for action in record["actions"]:
            assert action["verb"] in VERBS and isinstance(action["admissible"], bool)


@pytest.mark.slow
def test_rubric_bindings_name_entities_of_the_game(env: TextWorldEnvironment) -> None:
    checked = check_source(RUBRIC.read_text(), str(RUBRIC))
    rubric = checked.rubrics["textworld_quest"]
    env.reset(0)
    entities = {name.lower() for name in env.game_state["entities"]}
    for bind in rubric.binds:
        call = bind.value.args[0]  # lower(match(instruction, /re/, 1))
        assert isinstance(call.args[1], ast.Regex)
        found = re2.compile(("(?i)" if call.args[1].ignore_case else "") + call.args[1].pattern).search(
            env.objective
        )
        assert found is not None and found.group(1).lower() in entities


def test_environment_options_are_checked_before_any_game_loads(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a game spec needs a cache_dir"):
        TextWorldEnvironment(SimpleGame())
    with pytest.raises(ValueError, match="max_steps=0 must be at least 1"):
        TextWorldEnvironment(tmp_path / "game.z8", max_steps=0)
    family = TextWorldEnvironment(CookingGame(recipe=2, take=1), cache_dir=tmp_path)
    assert family.done and list(tmp_path.iterdir()) == []  # no game is made before a reset asks for one
    assert TextWorldEnvironment(str(tmp_path / "game.z8")).game_file(5) == tmp_path / "game.z8"
    with pytest.raises(RuntimeError, match="call reset"):
        family.step("look")
