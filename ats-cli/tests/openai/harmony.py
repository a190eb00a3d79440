"""gpt-oss's harmony format through the official client, on the gpt-oss
fixture. Its weights are random: in a required call the grammar lets it
reason first, which it would do until the token limit, so ATS_LOGIT_BIAS
(token ids from the cargo test) bans the tokens that begin "analysis", ends
a note at once and makes "commentary" a call. A required call comes back as
tool_calls in chat and as a function_call item in Responses, streamed too;
reasoning given back (chat's reasoning_content, a Responses reasoning item)
reaches the prompt."""

import json
import os

from harness import client, run

c = client()
BIAS = json.loads(os.environ["ATS_LOGIT_BIAS"])
PARAMS = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
          "required": ["unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "weather", "description": "The weather.",
                                            "parameters": PARAMS}}
FLAT = {"type": "function", "name": "weather", "description": "The weather.", "parameters": PARAMS}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


def check_args(arguments):
    assert json.loads(arguments)["unit"] in ("c", "f"), arguments


def required_chat(**kw):
    return c.chat.completions.create(model="ats", messages=ASK, tools=[WEATHER], tool_choice="required",
                                     temperature=0, max_tokens=60, logit_bias=BIAS, **kw)


def test_a_required_chat_call_is_tool_calls():
    r = required_chat()
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "weather", call
    check_args(call.function.arguments)


def test_a_streamed_chat_call_shows_no_markup():
    events = list(required_chat(stream=True))
    chunks = [e.choices[0] for e in events if e.choices]
    calls = [t for ch in chunks for t in (ch.delta.tool_calls or [])]
    assert calls and calls[0].function.name == "weather", calls
    check_args(calls[0].function.arguments)
    text = "".join(ch.delta.content or "" for ch in chunks)
    assert "<|" not in text, text
    assert chunks[-1].finish_reason == "tool_calls"


def conversation(reasoning):
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"unit\": \"c\"}"}}]}
    if reasoning:
        asked["reasoning_content"] = reasoning
    return ASK + [asked, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]


def test_reasoning_given_back_before_a_call_reaches_the_prompt():
    def prompt_tokens(msgs):
        r = c.chat.completions.create(model="ats", messages=msgs, tools=[WEATHER], temperature=0,
                                      max_tokens=4)
        return r.usage.prompt_tokens
    without = prompt_tokens(conversation(None))
    with_it = prompt_tokens(conversation("The user wants Oslo's weather."))
    assert with_it > without + 5, (with_it, without)


def required_response(**kw):
    return c.responses.create(model="ats", input="Weather in Oslo?", tools=[FLAT], tool_choice="required",
                              temperature=0, max_output_tokens=60, extra_body={"logit_bias": BIAS}, **kw)


def test_a_required_responses_call_is_a_function_call_item():
    r = required_response()
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "weather", r.output
    check_args(calls[0].arguments)
    assert all(o.type != "message" or "<|" not in o.content[0].text for o in r.output), r.output


def test_a_streamed_responses_call_ends_completed():
    events = list(required_response(stream=True))
    kinds = [e.type for e in events]
    assert kinds[-1] == "response.completed", kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    calls = [o for o in events[-1].response.output if o.type == "function_call"]
    assert calls and calls[0].name == "weather", events[-1].response.output


def test_a_reasoning_input_item_reaches_the_prompt():
    def input_tokens(items):
        r = c.responses.create(model="ats", input=items, tools=[FLAT], temperature=0, max_output_tokens=4)
        return r.usage.input_tokens
    call = [{"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"unit\": \"c\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
    thought = {"type": "reasoning", "id": "rs_1", "summary": [],
               "content": [{"type": "reasoning_text", "text": "The user wants Oslo's weather."}]}
    without = input_tokens(ASK + call)
    with_it = input_tokens(ASK + [thought] + call)
    assert with_it > without + 5, (with_it, without)


run(globals())
