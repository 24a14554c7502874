"""The shared tool-call parser: both spellings, plain messages, malformed calls, and that it never raises."""

import json
import string

from hypothesis import given, settings
from hypothesis import strategies as st
from tracec.trace_rl.envs.toolcall import (
    ToolCall,
    ToolCallError,
    _ActionParser,
    _flat_call,
    _Malformed,
    format_call,
    format_native_call,
    format_tool_call,
    parse_tool_call,
    render_result,
)


def test_action_form_reads_json_literals_and_bare_words():
    call = parse_tool_call(
        'Let me look.\n<action>f(s="x, y", n=3, x=-2.5e1, t=true, nul=null, l=[1, "a", b], '
        'o={"k": [false], k2: bare}, order_id=#W2378156, date=2024-05-20, zip=02134, '
        "reason=no longer needed)</action>"
    )
    assert call == ToolCall(
        name="f",
        arguments={
            "s": "x, y",
            "n": 3,
            "x": -25.0,
            "t": True,
            "nul": None,
            "l": [1, "a", "b"],
            "o": {"k": [False], "k2": "bare"},
            "order_id": "#W2378156",
            "date": "2024-05-20",
            "zip": "02134",
            "reason": "no longer needed",
        },
    )


def test_action_form_takes_single_quotes_python_literals_and_no_arguments():
    assert parse_tool_call("<action>f(a='it\\'s', b=True, c=None)</action>") == ToolCall(
        name="f", arguments={"a": "it's", "b": True, "c": None}
    )
    assert parse_tool_call("<ACTION> list_all_airports() </ACTION>") == ToolCall(name="list_all_airports")
    assert parse_tool_call("<action>list_all_airports</action>") == ToolCall(name="list_all_airports")


def test_json_forms():
    expected = ToolCall(name="get_user_details", arguments={"user_id": "sara_doe_496"})
    body = '{"name": "get_user_details", "arguments": {"user_id": "sara_doe_496"}}'
    assert parse_tool_call(f"<tool_call>{body}</tool_call>") == expected
    assert parse_tool_call(f"<tool_call>\n```json\n{body}\n```\n</tool_call>") == expected
    assert parse_tool_call(f"Checking.\n```json\n{body}\n```") == expected
    assert parse_tool_call(body) == expected
    assert parse_tool_call(f"<action>{body}</action>") == expected
    stringly = json.dumps({"name": "get_user_details", "arguments": json.dumps({"user_id": "sara_doe_496"})})
    assert parse_tool_call(stringly) == expected
    assert parse_tool_call('{"name": "f", "parameters": {"a": 1}}') == ToolCall(name="f", arguments={"a": 1})


def test_plain_messages_are_none():
    for text in [
        "",
        "Hello! How can I help?",
        "Your total is {1, 2}",
        '{"price": 10}',
        '```json\n{"total": 3}\n```',
        "I will call get_user_details(user_id=x) next.",
    ]:
        assert parse_tool_call(text) is None, text


def test_malformed_calls_say_what_is_wrong():
    cases = {
        "<action>f(1)</action>": "argument name",
        "<action>f(a=1</action>": "end of the call",
        "<action>f(a=1, a=2)</action>": "given twice",
        "<action>f(a=1) trailing</action>": "after the closing",
        "<action>f(a=1)": "not closed",
        "<action></action>": "empty",
        '<action>f(a="unterminated)</action>': "double-quoted",
        "<action>f(a=[1, 2)</action>": "list",
        "<tool_call>{not json}</tool_call>": "invalid JSON",
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>': "tool name",
        '<tool_call>{"name": "f", "arguments": [1]}</tool_call>': "must be an object",
        '```json\n{"name": "f", "arguments": 5}\n```': "must be an object",
        "<tool_call>" + "[" * 5000 + "</tool_call>": "nested too deeply",
        "<action>f(a=" + "[" * 100 + ")</action>": "nested too deeply",
    }
    for text, hint in cases.items():
        result = parse_tool_call(text)
        assert isinstance(result, ToolCallError), text
        assert hint in result.message, (text, result.message)


_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(name=_NAMES, arguments=st.dictionaries(_NAMES, _JSON, max_size=5))
def test_format_then_parse_round_trips(name, arguments):
    assert parse_tool_call(format_tool_call(name, arguments)) == ToolCall(name=name, arguments=arguments)
    native = format_native_call(name, arguments)  # also with `</tool_call>` inside a string: it is escaped
    assert native.startswith("<tool_call>\n{") and native.endswith("}\n</tool_call>")
    assert parse_tool_call(native) == ToolCall(name=name, arguments=arguments)
    assert parse_tool_call(format_call(name, arguments, "native")) == parse_tool_call(
        format_call(name, arguments, "text"))


def test_a_native_calls_json_error_is_located():
    message = parse_tool_call('<tool_call>\n{"name": "f",\n "arguments": {"a": 1,}}\n</tool_call>').message
    assert message == '<tool_call>: invalid JSON at line 2 column 23: Expecting property name enclosed in double quotes'
    assert parse_tool_call('<tool_call>{"name": "f", "arguments": "{1"}</tool_call>').message == (
        '<tool_call> "arguments": invalid JSON at line 1 column 2: Expecting property name enclosed in double quotes')


@settings(deadline=None)
@given(st.text())
def test_never_raises_on_any_text(text):
    result = parse_tool_call(text)
    assert result is None or isinstance(result, (ToolCall, ToolCallError))


_CALL_ALPHABET = "<>/()[]{}=,:'\"\\ \n-.#_" + string.ascii_lowercase[:6] + "0123456789" + "ntrueflsaio"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["<action>", "<tool_call>", "```json\n", "", "<action>f("]),
    st.text(_CALL_ALPHABET, max_size=60),
)
def test_never_raises_on_call_like_text(prefix, body):
    for text in (prefix + body, prefix + body + "</action>", prefix + body + "</tool_call>"):
        result = parse_tool_call(text)
        assert result is None or isinstance(result, (ToolCall, ToolCallError))
        if isinstance(result, ToolCallError):
            assert result.message and len(result.message) < 200


def test_render_result_is_compact_sorted_json():
    text = render_result({"b": 1, "a": [1, {"d": None, "c": "é"}]})
    assert text == '{"a":[1,{"c":"é","d":null}],"b":1}'
    assert render_result("Transfer successful") == '"Transfer successful"'


@settings(max_examples=60, deadline=None)
@given(_JSON)
def test_render_result_round_trips_and_is_canonical(value):
    text = render_result(value)
    assert json.loads(text) == value
    assert render_result(json.loads(text)) == text


def _full(body):
    """The full parser's reading of an `<action>` body, errors as `parse_tool_call` gives them."""
    try:
        return _ActionParser(body).call()
    except _Malformed as err:
        return ToolCallError(message=str(err))


# Mostly well-formed pieces, so that most generated calls parse, with near misses mixed in.
_KEYS = st.sampled_from(["a", "b", "c", "d", "trip", "user_id", "x.y-z", "_k", "A1", "n", "m", "1a", "é"])
_STRING_TEXT = st.text(st.sampled_from("ab Z,)(=:é€\U0001f600\"'\\\n\t\x00\x1f/"), max_size=8)
_CLEAN_VALUES = st.one_of(  # what the fast path takes: plain strings, JSON numbers, literals
    st.text(st.characters(blacklist_characters='"\\', blacklist_categories=("Cc", "Cs")), max_size=12).map(
        lambda s: f'"{s}"'
    ),
    st.integers(-(10**17), 10**17).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.sampled_from(["true", "false", "null", "True", "False", "None"]),
)
_NEAR_VALUES = st.one_of(
    _CLEAN_VALUES,
    _STRING_TEXT.map(lambda s: f'"{s}"'),  # quotes, backslashes and control characters inside
    _STRING_TEXT.map(lambda s: f"'{s}'"),
    _STRING_TEXT.map(json.dumps),  # escapes
    st.integers(-(10**25), 10**25).map(str),
    st.floats().map(repr),
    st.from_regex(r"[-+]?[0-9]{0,3}(\.[0-9]{0,2})?([eE][-+]?[0-9]{0,4})?", fullmatch=True),
    st.sampled_from(["01", "-00", "1e5", "1E+5", "-0.0", "1.", ".5", "+1", "0x1F", "1_000", "١٢"]),
    st.sampled_from(["1e999", "-1e400", "1E+309"]),  # not finite: the word stays a string
    st.sampled_from(
        ["TRUE", "trueish", "nul", "#W23", "T 1", "[1]", "{}", "", '"a"b', "'a'b", "'it\\'s'", "'a\\n'"]
    ),
)
_SPACE = st.sampled_from(["", "", " ", "  ", "\n", "\t", "\u00a0"])


@st.composite
def _flat_like(draw, values=_NEAR_VALUES, keys=_KEYS):
    """`name(key=value, ...)` with near misses in values, separators, spacing, keys and trailing commas."""
    pairs = draw(
        st.lists(st.tuples(keys, st.sampled_from(["=", "=", "=", ":", " = ", "=="]), values), max_size=4)
    )
    gap = draw(_SPACE)
    args = ("," + gap).join(f"{key}{sep}{gap}{value}" for key, sep, value in pairs)
    tail = draw(st.sampled_from(["", "", "", "", ",", " ,"]))
    name = draw(st.sampled_from(["cancel", "get_user", "a.b-c", "f", "T", "g_2", "h", "9f"]))
    return f"{name}{draw(_SPACE)}({gap}{args}{tail}{gap})".strip()


@settings(max_examples=500, deadline=None)
@given(_flat_like(), _NEAR_VALUES)
def test_flat_fast_path_agrees_with_the_full_parser(body, value):
    for text in (body, f"f(a={value})"):  # the second puts every near-miss value in an otherwise good call
        # reprs, not ==: they tell 1 from 1.0 from True, -0.0 from 0.0, and the order of the arguments
        full = repr(_full(text))
        fast = _flat_call(text)
        assert fast is None or repr(fast) == full, text
        assert repr(parse_tool_call(f"<action>{text}</action>")) == full


@settings(max_examples=200, deadline=None)
@given(
    name=_NAMES,
    arguments=st.dictionaries(_NAMES, _CLEAN_VALUES, max_size=5),
    gap=st.sampled_from(["", " ", "\n"]),
)
def test_flat_fast_path_takes_the_usual_calls(name, arguments, gap):
    body = (
        f"{name}({gap}"
        + f",{gap}".join(f"{key}={gap}{value}" for key, value in arguments.items())
        + f"{gap})"
    )
    fast = _flat_call(body)
    assert fast is not None and repr(fast) == repr(_full(body)), body


def test_a_number_too_long_to_convert_is_never_a_crash():
    result = parse_tool_call(f"<action>f(n={'9' * 5000})</action>")
    assert isinstance(result, ToolCallError) and "cannot be read" in result.message
    bare_json = '{"name": "f", "arguments": {"n": ' + "9" * 5000 + "}}"
    assert parse_tool_call(bare_json) is None  # unreadable JSON outside <action> reads as a message, as any bad JSON
