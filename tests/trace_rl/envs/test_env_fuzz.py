"""Whatever an agent writes, a step answers with an observation and never raises."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.trace_rl.envs.capability import CapabilityEnvironment, load_environment

REPO = Path(__file__).resolve().parents[3]
PROGRAMS = [load_environment(str(p)) for p in sorted((REPO / "examples" / "envs").glob("*.rubric"))]
TOOL_NAMES = sorted({name for program in PROGRAMS for name in program.tools}) + ["nope", ""]
PARAM_NAMES = ["trip", "user", "name", "room", "guest", "nights", "plan", "line", "on", "day", "visit", "amount",
               "source", "dest", "bill", "account", "order", "x"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def agent_turns(draw: st.DrawFn) -> str:
    tool = draw(st.sampled_from(TOOL_NAMES))
    args = draw(st.dictionaries(st.sampled_from(PARAM_NAMES), json_values, max_size=4))
    form = draw(st.sampled_from(["action", "json", "text", "broken"]))
    if form == "action":
        return f"<action>{tool}({', '.join(f'{k}={json.dumps(v)}' for k, v in args.items())})</action>"
    if form == "json":
        return json.dumps({"name": tool, "arguments": args})
    if form == "broken":
        body = draw(st.text(alphabet="(){}[]=,:\"' abc$1.", max_size=30))
        return f"<action>{tool}{body}" + draw(st.sampled_from(["</action>", ""]))
    return draw(st.text(max_size=60))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(range(len(PROGRAMS))), st.integers(0, 10**6), st.lists(agent_turns(), min_size=1, max_size=8))
def test_garbage_turns_never_raise(index: int, seed: int, turns: list[str]) -> None:
    env = CapabilityEnvironment(PROGRAMS[index], max_steps=6)
    env.reset(seed)
    for turn in turns:
        result = env.step(turn)
        assert isinstance(result.observation.text, str) and result.observation.role in ("user", "tool")
        assert isinstance(result.done, bool) and 0.0 <= result.reward <= 1.0
        if result.done:
            break
    scores = env.scores()
    assert 0.0 <= scores.reward <= 1.0
    json.dumps(env.trajectory("fuzz"))
