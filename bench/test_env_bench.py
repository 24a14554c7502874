"""The environment interpreter against the same environment written by hand in Python, side by side.

The environment is tests/data/cancel_trip.rubric (the library's first cancel_trip). `HandTrips` draws the same tables
from the same seeds, answers every turn with the same observation and records the same `toolenv` facts (checked
before timing), so both sides do the same work; only the interpreter reads it from the `.rubric`.
Timed: `reset` (tables, picks, task, gold replay) and `step` over a fixed turn sequence per episode (three gold
calls, a refused cancel, an unknown tool, the final message), through the environment protocol: each step gives a
`StepResult`, and the last one the episode's reward (the tables' digest against the gold one), on both sides.
Writes bench/RESULTS.md, section "environments".
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment
from tracec.trace_rl.envs.capability.episode import appears
from tracec.trace_rl.envs.capability.generate import (
    CITIES,
    FIRST_DAY,
    FIRST_NAMES,
    LAST_NAMES,
    N_DAYS,
    rng_for,
)
from tracec.trace_rl.envs.consent import says_yes
from tracec.trace_rl.envs.protocol import Observation, StepResult
from tracec.trace_rl.envs.toolcall import (
    ToolCall,
    ToolCallError,
    format_tool_call,
    parse_tool_call,
    render_result,
)

from bench.results import markdown_table, record
from bench.sides import Rounds, describe, load_average

PATH = Path(__file__).resolve().parents[1] / "tests" / "data" / "cancel_trip.rubric"
COMMAND = "pytest bench/test_env_bench.py --benchmark-only -p no:xdist"
N_EPISODES = 200
ROUNDS = 30  # many short rounds (each well under a second): their median is steady
DONE = re.compile(r"\b(?:done|finished|completed?|all set)\b|###STOP###", re.IGNORECASE)


class HandTrips:
    """cancel_trip written by hand, the way one would without the language."""

    def __init__(self, max_steps: int = 30):
        self.max_steps = max_steps
        days = [FIRST_DAY.toordinal() + n for n in range(N_DAYS)]
        self.days = [FIRST_DAY.fromordinal(d).isoformat() for d in days]

    def _tables(self, seed: int, draw: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rng = rng_for(seed, f"{draw}/table/users")
        n = rng.randint(3, 8)
        ids = [f"U{k}" for k in rng.sample(range(1000, 10000), n)]
        names = [f"{FIRST_NAMES[k // 40]} {LAST_NAMES[k % 40]}" for k in rng.sample(range(1600), n)]
        tiers = [rng.choice(("gold", "silver", "regular")) for _ in range(n)]
        users = [{"id": i, "name": m, "tier": t} for i, m, t in zip(ids, names, tiers)]
        rng = rng_for(seed, f"{draw}/table/trips")
        n = rng.randint(6, 20)
        columns = [
            [f"T{k}" for k in rng.sample(range(1000, 10000), n)], [rng.choice(ids) for _ in range(n)],
            [rng.choice(CITIES) for _ in range(n)], [rng.choice(CITIES) for _ in range(n)],
            [self.days[rng.randrange(N_DAYS)] for _ in range(n)],
            [rng.choice(("active", "cancelled")) for _ in range(n)],
            [rng.randint(50, 900) for _ in range(n)],
        ]
        keys = ("id", "user", "origin", "dest", "day", "status", "price")
        trips = [dict(zip(keys, row)) for row in zip(*columns)]
        for index, trip in enumerate(trips):  # `where origin != dest`: redraw the row but its key
            attempt = 0
            while trip["origin"] == trip["dest"]:
                rng = rng_for(seed, f"{draw}/table/trips/row/{index}/{attempt}")
                trip.update(user=rng.choice(ids), origin=rng.choice(CITIES), dest=rng.choice(CITIES),
                            day=self.days[rng.randrange(N_DAYS)], status=rng.choice(("active", "cancelled")),
                            price=rng.randint(50, 900))
                attempt += 1
        return users, trips

    def reset(self, seed: int) -> Observation:
        for draw in range(32):
            users, trips = self._tables(seed, draw)
            rng = rng_for(seed, f"{draw}/picks")
            me = dict(rng.choice(users))
            active = [t for t in trips if t["user"] == me["id"] and t["status"] == "active"]
            if active:
                target = dict(rng.choice(active))
                break
        else:
            raise RuntimeError(f"no active trip in 32 draws of seed {seed}")
        self.users, self.trips = users, trips
        self.by_id = {t["id"]: t for t in trips}
        gold = {"users": users, "trips": [dict(t, status="cancelled") if t["id"] == target["id"] else t for t in trips]}
        self.gold_digest, self.refund = _digest(gold), target["price"]
        self.task = (f"Hi, I'm {me['name']}. Please cancel my trip from {target['origin']} to {target['dest']} on "
                     f"{target['day']}, and tell me the refund.")
        self.steps, self.done, self.errors = 0, False, 0
        self.last_message: str | None = None
        self.revealed: set[str] = set()
        self.revealed_list: list[str] = []
        self.states: list[dict[str, Any]] = [{"revealed": [], "checked": False, "user_msg": self.task,
                                              "db_changed": False, "n_errors": 0, "done": False}]
        self.actions: list[dict[str, Any]] = []
        self.confirmed: bool | None = says_yes(self.task)  # the user's latest message's consent, read when needed
        return Observation(text=self.task, role="user")

    def step(self, text: str) -> StepResult:
        self.steps += 1
        user_msg = self.states[-1]["user_msg"]
        if self.confirmed is None:
            self.confirmed = says_yes(user_msg)
        confirmed = self.confirmed
        call = parse_tool_call(text)
        if call is None:
            ended = DONE.search(text) is not None
            reply = ("Thank you, bye." if ended
                     else "Yes, please go ahead with my request, and tell me when you are done.")
            self.last_message, self.done = text, ended or self.steps >= self.max_steps
            self.confirmed = None
            self.actions.append({"kind": "message", "accepted": True, "args": [], "confirmed": confirmed, "text": text})
            self.states.append({"revealed": self.revealed_list, "checked": False, "user_msg": reply,
                                "db_changed": False, "n_errors": self.errors, "done": self.done})
            return self._result(reply, "user")
        action: dict[str, Any] = {"kind": "invalid", "accepted": False, "args": [], "confirmed": confirmed,
                                  "text": text}
        state: dict[str, Any] = {"checked": False, "db_changed": False}
        error: str | None
        if isinstance(call, ToolCallError):
            error = call.message
        else:
            error = self.call(call, action, state)
        if error is not None:
            self.errors += 1
            state["last_error"] = error
        self.done = self.steps >= self.max_steps
        self.actions.append(action)
        state.update(revealed=self.revealed_list, user_msg=user_msg, n_errors=self.errors, done=self.done)
        self.states.append(state)
        return self._result(render_result({"error": error}) if error is not None else state.pop("observation"), "tool")

    def _result(self, text: str, role: Any) -> StepResult:
        return StepResult(observation=Observation(text=text, role=role), done=self.done,
                          reward=self.reward() if self.done else 0.0, state=self.states[-1], action=self.actions[-1])

    def call(self, call: ToolCall, action: dict[str, Any], state: dict[str, Any]) -> str | None:
        args = call.arguments
        action["tool"] = call.name
        tools = ("find_user", "list_trips", "cancel")
        if call.name not in tools:
            close = difflib.get_close_matches(call.name, tools, n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            return f"unknown tool `{call.name}`{hint}; tools are: {', '.join(tools)}"
        param = {"find_user": "name", "list_trips": "user", "cancel": "trip"}[call.name]
        value = args.get(param)
        action["kind"] = "mutate" if call.name == "cancel" else "query"
        action["args"] = sorted({v for v in args.values() if isinstance(v, str)})
        if call.name != "find_user" and isinstance(value, str):
            action["target"] = value
        if set(args) != {param} or not isinstance(value, str):
            return f"`{call.name}` takes {param}"
        action["accepted"] = True
        if call.name == "cancel":
            trip = self.by_id.get(value)
            if trip is None or trip["status"] != "active":
                action["accepted"] = False
                return f"trip {value} is not active"
            trip["status"] = "cancelled"
            state.update(db_changed=True, observation=render_result({"ok": True, "updated": [trip]}))
            self._reveal([trip["id"], trip["user"]])
            return None
        rows = ([u for u in self.users if u["name"] == value] if call.name == "find_user"
                else [t for t in self.trips if t["user"] == value])
        self._reveal([row[c] for row in rows for c in (("id",) if call.name == "find_user" else ("id", "user"))])
        state.update(checked=True, rows=len(rows), observation=render_result(rows))
        return None

    def _reveal(self, keys: list[str]) -> None:
        if not self.revealed.issuperset(keys):
            self.revealed.update(keys)
            self.revealed_list = sorted(self.revealed)

    def reward(self) -> float:
        state = 1.0 if _digest({"users": self.users, "trips": self.trips}) == self.gold_digest else 0.0
        report = 1.0 if appears(self.refund, self.last_message or "") else 0.0
        return 0.6 * state + 0.4 * report


def _digest(tables: dict[str, Any]) -> str:
    text = json.dumps(tables, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def turns(env: CapabilityEnvironment) -> list[str]:
    assert env.scenario is not None
    gold = [format_tool_call(c.name, c.arguments) for c in env.scenario.gold_calls]
    return gold + [gold[-1], gold[-1].replace("cancel(", "cancle("), f"Done, your refund is {env.scenario.report[0]}."]


@pytest.fixture(scope="module")
def sides():  # type: ignore[no-untyped-def]
    program = load_environment(str(PATH))
    scripts = {}
    for seed in range(N_EPISODES):  # the turn script of every seed, and the check that both sides agree on it
        env, hand = CapabilityEnvironment(program), HandTrips()
        assert env.reset(seed) == hand.reset(seed)
        scripts[seed] = turns(env)
        for turn in scripts[seed]:
            assert env.step(turn) == hand.step(turn), (seed, turn)
        assert env.states == hand.states and env.actions == hand.actions, seed
        assert env.scores().reward == hand.reward() == 1.0
    return {"interpreter": lambda: CapabilityEnvironment(program), "hand-written": HandTrips}, scripts


def test_environment_throughput(benchmark, sides) -> None:  # type: ignore[no-untyped-def]
    """Each round resets every side's 200 environments and plays their turns, the sides in alternating order (the
    machine is shared: drift then slows both alike); each figure is a side's median round, in wall time and in CPU
    time (which the other processes on a shared machine inflate less), each ratio the median of per-round ratios."""
    factories, scripts = sides
    envs = {side: [make() for _ in range(N_EPISODES)] for side, make in factories.items()}
    seconds: dict[str, list[float]] = {f"{side} {phase} {clock}": [] for side in envs for phase in ("reset", "step")
                                       for clock in ("wall", "cpu")}
    turn = [0]

    def one_round() -> None:
        order = list(envs) if turn[0] % 2 else list(envs)[::-1]
        turn[0] += 1
        for side in order:
            wall, cpu = time.perf_counter(), time.process_time()
            for seed, env in enumerate(envs[side]):
                env.reset(seed)
            wall_reset, cpu_reset = time.perf_counter(), time.process_time()
            for seed, env in enumerate(envs[side]):
                for text in scripts[seed]:
                    env.step(text)
            for phase, clock, taken in (("reset", "wall", wall_reset - wall), ("reset", "cpu", cpu_reset - cpu),
                                        ("step", "wall", time.perf_counter() - wall_reset),
                                        ("step", "cpu", time.process_time() - cpu_reset)):
                seconds[f"{side} {phase} {clock}"].append(taken)

    one_round()  # warm, untimed
    for values in seconds.values():
        values.clear()
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    rounds = Rounds(seconds)
    steps = sum(len(script) for script in scripts.values())
    rows = [[side, rounds.time(f"{side} reset wall").scaled(1e6 / N_EPISODES).cell(),
             rounds.time(f"{side} step wall").scaled(1e6 / steps).cell(),
             rounds.time(f"{side} step cpu").scaled(1e6 / steps).cell(),
             rounds.time(f"{side} reset cpu").scaled(1e6 / N_EPISODES).cell()]
            for side in ("hand-written", "interpreter")]

    def ratio(phase: str, clock: str) -> str:
        return rounds.ratio(f"hand-written {phase} {clock}", f"interpreter {phase} {clock}").cell(2, "x")

    rows.append(["hand-written / interpreter time (target >= 0.5x)", ratio("reset", "wall"), ratio("step", "wall"),
                 ratio("step", "cpu"), ratio("reset", "cpu")])
    steps_per_s = steps / rounds.time("interpreter step wall").median
    header = ["side", "us/reset", "us/step", "CPU us/step", "CPU us/reset"]
    record("environments", markdown_table(header, rows)
           + f"\n\nInterpreter steps/s: {steps_per_s:,.0f} at the median round (target >= 20,000: "
           + ("met" if steps_per_s >= 20_000 else "missed") + f"). cancel_trip, {N_EPISODES} seeds, {steps} steps. "
           + describe(len(rounds), "in-process", "1 (both sides are single-threaded Python)")
           + " A step is one agent turn: parse the call, run the tool, render the JSON result, record the toolenv "
           "facts, give a `StepResult`; an episode's last step also scores it (its reward). Both sides give the same "
           "observations, rewards and facts (checked before timing), and read the user's consent once a message, when "
           f"a turn follows it. Load average (1 min): {load_average()}.",
           COMMAND)
