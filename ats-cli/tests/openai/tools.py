"""Tool calling through the official client: with tool_choice required and
named the answer is a call to a declared function whose arguments match its
schema (streamed too); with auto it is a call or text; a conversation with
a call and its result gets an answer. ATS_TOOL_FORMAT names the format the
server's log must show (checked by the cargo test)."""

import json

import jsonschema

from harness import client, run

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 30}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_call(call, names=SCHEMAS):
    assert call.type == "function"
    assert call.id
    assert call.function.name in names, call
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def create(**kw):
    return client().chat.completions.create(model="ats", **{"temperature": 0, "max_tokens": 120, **kw})


def test_required_is_a_call_to_a_declared_function():
    r = create(messages=ASK, tools=TOOLS, tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert len(choice.message.tool_calls) == 1
    check_call(choice.message.tool_calls[0])


def test_a_named_function_is_called():
    r = create(messages=ASK, tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = r.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_time", r
    check_call(calls[0], {"get_time"})


def test_streamed_calls_come_as_deltas():
    calls, finish = {}, None
    for chunk in create(messages=ASK, tools=TOOLS, tool_choice="required", stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            c["name"] += (tc.function.name or "") if tc.function else ""
            c["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert len(calls) == 1
    c = calls[0]
    assert c["id"] and c["name"] in SCHEMAS, c
    jsonschema.validate(json.loads(c["arguments"]), SCHEMAS[c["name"]])


def test_auto_is_a_call_or_text():
    r = create(messages=ASK, tools=TOOLS, tool_choice="auto")
    m = r.choices[0].message
    if m.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls"
        for c in m.tool_calls:
            check_call(c)
    else:
        assert isinstance(m.content, str), m


def test_a_tool_round_trip_gets_an_answer():
    first = create(messages=ASK, tools=TOOLS, tool_choice="required").choices[0].message
    call = first.tool_calls[0]
    messages = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    r = create(messages=messages, tools=TOOLS, tool_choice="none", max_tokens=40)
    m = r.choices[0].message
    assert m.tool_calls is None
    assert isinstance(m.content, str), r
    # and with the tools still offered, the answer is a call or text again
    r = create(messages=messages, tools=TOOLS)
    m = r.choices[0].message
    assert m.tool_calls or isinstance(m.content, str)


run(globals())
