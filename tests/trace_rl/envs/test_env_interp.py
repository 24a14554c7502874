"""The environment interpreter: seeded reset, tool calls, requires, the user, limits, scores and recorded facts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from numerics import tolerance
from tracec.dsl.errors import EnvError
from tracec.runtime.facts.trajectories.records import write_records
from tracec.trace_rl.envs.capability import CapabilityEnvironment, Limits, compile_environment, load_environment
from tracec.trace_rl.envs.capability.episode import appears
from tracec.trace_rl.envs.protocol import Observation
from tracec.trace_rl.envs.toolcall import format_tool_call
from tracec.trace_rl.envs.users import LLMUser

REPO = Path(__file__).resolve().parents[3]
TRIPS = REPO / "tests" / "data" / "cancel_trip.rubric"


@pytest.fixture(scope="module")
def program():  # type: ignore[no-untyped-def]
    return load_environment(str(TRIPS))


def step(env: CapabilityEnvironment, text: str) -> tuple[str, bool]:
    """A step as (observation text, done), after checking the rest of what the protocol's step gives."""
    result = env.step(text)
    assert result.state is env.states[-1] and result.action is env.actions[-1]
    assert result.observation.role == ("user" if env.actions[-1]["kind"] == "message" else "tool")
    assert result.reward == (env.scores().reward if result.done else 0.0)
    return result.observation.text, result.done


def gold_turns(env: CapabilityEnvironment) -> list[str]:
    assert env.scenario is not None
    return [format_tool_call(c.name, c.arguments) for c in env.scenario.gold_calls]


def test_reset_is_a_pure_function_of_the_seed(program) -> None:  # type: ignore[no-untyped-def]
    first, second = CapabilityEnvironment(program), CapabilityEnvironment(program)
    assert first.reset(7) == second.reset(7) == Observation(text=first.scenario.task, role="user")  # type: ignore[union-attr]
    a, b = first.scenario, second.scenario
    assert a is not None and b is not None
    assert ((a.db.digest(), a.gold_digest, a.gold_calls, a.report)
            == (b.db.digest(), b.gold_digest, b.gold_calls, b.report))
    assert len({CapabilityEnvironment(program).reset(seed) for seed in range(30)}) == 30


def test_reset_is_the_same_in_another_process(program) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import sys; from tracec.trace_rl.envs.capability import load_environment; p = load_environment(sys.argv[1]); "
        "s = p.scenario(11); print(s.task); print(s.db.digest()); print(s.gold_digest)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(TRIPS)], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}).stdout.splitlines()
    scenario = program.scenario(11)
    assert out == [scenario.task, scenario.db.digest(), scenario.gold_digest]


def test_gold_turns_score_one_and_the_trip_is_cancelled(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(3)
    observations = [step(env, turn) for turn in gold_turns(env)]
    assert all(not done for _, done in observations)
    assert json.loads(observations[-1][0])["updated"][0]["status"] == "cancelled"
    assert step(env, f"Done: your refund is {env.scenario.report[0]}.") == ("Thank you, bye.", True)  # type: ignore[union-attr]
    assert env.scores().reward == 1.0


def test_partial_work_scores_by_the_reward_formula(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(3)
    for turn in gold_turns(env):
        step(env, turn)
    step(env, "Done, I cancelled it.")
    assert (env.scores().state, env.scores().report, env.scores().reward) == (1.0, 0.0, 0.6)
    env.reset(3)
    step(env, f"I am done, the refund is {env.scenario.report[0]}")  # type: ignore[union-attr]
    assert (env.scores().state, env.scores().report) == (0.0, 1.0)
    assert env.scores().reward == pytest.approx(0.4, abs=tolerance(4, 1.0, float))  # weighted scores <= 1


def test_failed_require_is_a_tool_error_and_changes_nothing(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(3)
    target = env.scenario.lets["target"]["id"]  # type: ignore[union-attr]
    step(env, f"<action>cancel(trip={target})</action>")
    before = env.db.digest()
    observation, done = step(env, f'<action>cancel(trip="{target}")</action>')
    assert json.loads(observation) == {"error": f"trip {target} is not active"}
    assert env.db.digest() == before and not done
    assert env.actions[-1] == {"kind": "mutate", "accepted": False, "args": [target], "confirmed": False,
                               "text": f'<action>cancel(trip="{target}")</action>', "tool": "cancel", "target": target}
    assert env.states[-1]["last_error"] == f"trip {target} is not active"
    assert env.states[-1]["n_errors"] == 1 and env.states[-2]["db_changed"] is True


@pytest.mark.parametrize(
    "turn, error",
    [
        ("<action>cancle(trip=T1)</action>",
         "unknown tool `cancle` (did you mean `cancel`?); tools are: find_user, list_trips, cancel"),
        ("<action>cancel(trip=</action>", "malformed <action> at column 13: expected a value"),
        ("<action>cancel(trp=T1)</action>",
         "`cancel` has no argument `trp`; did you mean `trip`? (it takes cancel(trip: key) changes trips)"),
        ("<action>cancel()</action>", "`cancel` needs the argument `trip` (it takes cancel(trip: key) changes trips)"),
        ("<action>cancel(trip=[1, 2])</action>", "argument `trip` of `cancel`: expected a string, got a list"),
        ("<action>cancel(trip=T0000)</action>", "trip T0000 is not active"),
        ('<tool_call>{"name": "find_user", "arguments": {"name": true}}</tool_call>',
         "argument `name` of `find_user`: expected a string, got a boolean"),
        ("<action>cancel(trip=\"" + "x" * 5000 + "\")</action>",
         "argument `trip` of `cancel`: 5000 characters; the limit is 4096"),
    ],
)
def test_bad_calls_are_observations_not_exceptions(program, turn: str, error: str) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(0)
    observation, done = step(env, turn)
    assert json.loads(observation) == {"error": error}
    assert not done and env.states[-1]["last_error"] == error


def test_json_function_call_form_and_numbers_for_keys(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(5)
    me = env.scenario.lets["me"]  # type: ignore[union-attr]
    observation, _ = step(env, json.dumps({"name": "list_trips", "arguments": {"user": me["id"]}}))
    rows = json.loads(observation)
    assert rows and all(row["user"] == me["id"] for row in rows)
    assert env.actions[-1]["kind"] == "query" and env.states[-1]["rows"] == len(rows)
    assert set(env.states[-1]["revealed"]) == {me["id"]} | {row["id"] for row in rows}
    observation, _ = step(env, "<action>list_trips(user=4821)</action>")  # a number reads as the key "4821"
    assert observation == "[]"


def test_messages_go_to_the_user_until_the_agent_is_done(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(1)
    target = env.scenario.lets["target"]["id"]  # type: ignore[union-attr]
    step(env, f"<action>list_trips(user={target})</action>")
    assert env.actions[-1]["confirmed"] is False  # the user has only stated the task
    reply = "Yes, please go ahead with my request, and tell me when you are done."
    assert step(env, "Which trip do you mean?") == (reply, False)
    assert env.states[-1]["user_msg"] == reply
    step(env, f"<action>cancel(trip={target})</action>")
    assert env.actions[-1]["confirmed"] is True  # the user's latest message says yes
    assert env.states[-1]["checked"] is False
    assert step(env, "All finished!") == ("Thank you, bye.", True)
    assert env.states[-1]["done"] is True and env.actions[-1]["kind"] == "message"
    with pytest.raises(RuntimeError, match="episode is over"):
        step(env, "hello?")


def test_step_limit_ends_the_episode(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program, max_steps=2)
    env.reset(1)
    assert step(env, "<action>list_trips(user=U1)</action>")[1] is False
    assert step(env, "<action>list_trips(user=U1)</action>")[1] is True
    with pytest.raises(ValueError, match="max_steps must be between 1 and 1000"):
        CapabilityEnvironment(program, max_steps=0)


def test_too_long_turn_is_an_invalid_action(program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(1)
    observation, done = step(env, "a" * 20000)
    assert json.loads(observation) == {"error": "a turn holds at most 16384 characters, this one has 20000"}
    assert env.actions[-1]["kind"] == "invalid" and len(env.actions[-1]["text"]) == 16384 and not done


def test_llm_user_sees_only_messages_and_stops_the_episode(program) -> None:  # type: ignore[no-untyped-def]
    class FakeBackend:
        def __init__(self) -> None:
            self.calls: list[list[dict[str, str]]] = []

        def generate(self, messages: list[dict[str, str]]) -> str:
            self.calls.append(messages)
            return "Yes, that one." if len(self.calls) == 1 else "###STOP###"

    backend = FakeBackend()
    env = CapabilityEnvironment(program, user=LLMUser(backend))
    task = env.reset(2).text
    assert step(env, "<action>list_trips(user=U1)</action>")[1] is False
    assert step(env, "Is it the trip on Monday?") == ("Yes, that one.", False)
    assert step(env, "Cancelled.") == ("Thank you, bye.", True)
    first = backend.calls[0]
    assert first[0]["role"] == "system" and task in first[0]["content"]
    assert [(m["role"], m["content"]) for m in first[1:]] == [("assistant", task),
                                                              ("user", "Is it the trip on Monday?")]
    assert len(backend.calls[1]) == 5


SMALL = """
environment small "swap and picks" {
  table things(id: key, v: int 1..100, tag: enum(a, b, c, d, e, f, g, h)) rows 2..3
  let one = pick(things where tag == h)
  let two = pick(things where id != one.id)
  task "swap {one.id} and {two.id}"
  tool swap(x: key, y: key)
    require $x != $y else "same"
    set things[$x].v = things[$y].v
    set things[$y].v = things[$x].v
  solution swap(one.id, two.id)
  reward state
}
"""


def test_assignments_read_the_state_before_the_call_and_picks_redraw() -> None:
    # `tag == h` on 2..3 rows of 8 tags fails most draws: the scenario is re-drawn until a pick succeeds.
    program = compile_environment(SMALL)
    env = CapabilityEnvironment(program)
    env.reset(4)
    one, two = env.scenario.lets["one"], env.scenario.lets["two"]  # type: ignore[union-attr]
    observation, _ = step(env, f"<action>swap(x={one['id']}, y={two['id']})</action>")
    values = {row["id"]: row["v"] for row in json.loads(observation)["updated"]}
    assert values == {one["id"]: two["v"], two["id"]: one["v"]}
    assert json.loads(step(env, f"<action>swap(x={one['id']}, y=Q1)</action>")[0]) == {
        "error": "no row of `things` has the key `Q1`"}


def test_pick_that_never_finds_a_row_names_its_location() -> None:
    text = SMALL.replace("pick(things where tag == h)", "pick(things where tag == h and tag == a)")
    with pytest.raises(EnvError) as info:
        compile_environment(text, "small.rubric").scenario(0)
    assert info.value.format().splitlines()[0] == (
        "small.rubric:4:13: error: `pick(things ...)` found no row in 32 draws of seed 0; "
        "loosen its condition or generate more rows")


def test_a_solution_that_fails_is_an_environment_error() -> None:
    text = TRIPS.read_text().replace("cancel(target.id)", "cancel(target.id); cancel(target.id)")
    with pytest.raises(EnvError, match=r"the solution's call to `cancel` fails on seed 0: trip T\d+ is not active"):
        compile_environment(text, "trips.rubric").scenario(0)


def test_a_long_task_text_is_an_environment_error(program) -> None:  # type: ignore[no-untyped-def]
    tiny = compile_environment(TRIPS.read_text(), limits=Limits(max_string=100))
    with pytest.raises(EnvError, match="the task text has 1.. characters on seed 0; the limit is 100"):
        tiny.scenario(0)


def test_appears_matches_numbers_as_numbers_and_words_without_case() -> None:
    assert appears(1250.5, "you get $1,250.50 back")
    assert appears(163, "Refund: 163 dollars") and not appears(163, "Refund: 1630 dollars")
    assert appears("Paris", "the trip to PARIS is cancelled") and not appears("Paris", "nothing")
    assert appears("2025-01-10", "moved to 2025-01-10.") and appears(True, "that is true")


def test_trajectories_are_written_as_jsonl(tmp_path: Path, program) -> None:  # type: ignore[no-untyped-def]
    env = CapabilityEnvironment(program)
    env.reset(3)
    for turn in gold_turns(env):
        step(env, turn)
    step(env, f"Done, refund {env.scenario.report[0]}")  # type: ignore[union-attr]
    path = tmp_path / "out.jsonl"
    write_records([env.trajectory("e0"), env.trajectory("e1")], path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["episode"] for line in lines] == ["e0", "e1"]
    first = lines[0]
    assert first["task"] == "cancel_trip/3" and first["success"] is True and first["env_reward"] == 1.0
    assert len(first["states"]) == len(first["actions"]) + 1 == 5

    def broken():  # type: ignore[no-untyped-def]
        yield env.trajectory("e2")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_records(broken(), path)
    assert [json.loads(line)["episode"] for line in path.read_text().splitlines()] == ["e0", "e1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


ROWS = """
environment rows "a table condition" {
  table things(id: key, v: int 1..100, tag: enum(a, b, c, d, e, f, g, h)) rows 2..6
  let one = pick(things)
  task "look at {one.id}"
  tool get(id: key) -> things where id == $id
  solution get(one.id)
  reward state
}
"""


def test_a_table_where_holds_for_every_row_and_redraws_only_the_rows_it_refuses() -> None:
    # Eight tags, so `tag != a` refuses about one row in eight; keys (unique across the table) are kept on a redraw.
    constrained = compile_environment(ROWS.replace("rows 2..6", "rows 2..6 where tag != a and v > 1"))
    free = compile_environment(ROWS)
    refused = 0
    for seed in range(300):
        rows = constrained.scenario(seed).db.rows["things"]
        assert all(row["tag"] != "a" and row["v"] > 1 for row in rows)
        before = free.scenario(seed).db.rows["things"]
        assert [row["id"] for row in rows] == [row["id"] for row in before]
        for row, old in zip(rows, before):  # a row the condition already held for is left as it was drawn
            if old["tag"] != "a" and old["v"] > 1:
                assert row == old
            else:
                refused += 1
        assert constrained.scenario(seed).db.rows["things"] == rows  # still a pure function of the seed
    assert refused > 0


def test_a_table_where_no_draw_satisfies_names_its_location() -> None:
    text = ROWS.replace("rows 2..6", "rows 2..6 where v > 100")
    with pytest.raises(EnvError) as info:
        compile_environment(text, "rows.rubric").scenario(0)
    assert info.value.format().splitlines()[0] == (
        "rows.rubric:3:91: error: no row of `things` satisfies its `where` in 100 draws on seed 0; "
        "loosen the condition or widen the columns it reads")
