"""The Responses API through the official client: text and instructions
equal to the same chat at temperature 0, the stream's named events in order
and their deltas equal to the whole answer, structured output, and stored
state refused by name."""

import json

import jsonschema
import openai

from harness import client, run

c = client()
GREEDY = dict(model="ats", temperature=0, max_output_tokens=12)


def chat_text(messages):
    r = c.chat.completions.create(model="ats", messages=messages, temperature=0, max_tokens=12)
    return r.choices[0].message.content


def test_text_input_equals_the_chat_answer():
    r = c.responses.create(input="Name a colour.", **GREEDY)
    assert r.object == "response" and r.status in ("completed", "incomplete"), r
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.output_text == chat_text([{"role": "user", "content": "Name a colour."}])
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_instructions_and_items_are_the_conversation():
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
        {"role": "user", "content": "Count to three."},
    ]
    r = c.responses.create(input=items, instructions="Be brief.", **GREEDY)
    want = chat_text([{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"},
                      {"role": "user", "content": "Count to three."}])
    assert r.output_text == want
    assert r.instructions == "Be brief."


def test_the_stream_has_the_events_in_order():
    whole = c.responses.create(input="Name a fruit.", **GREEDY).output_text
    events = list(c.responses.create(input="Name a fruit.", stream=True, **GREEDY))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[1] == "response.in_progress", kinds
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == whole
    assert events[-1].response.output_text == whole


def test_max_output_tokens_makes_it_incomplete():
    r = c.responses.create(model="ats", input="Tell a long story.", temperature=0, max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_json_schema_through_text_format():
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = c.responses.create(input="A person as JSON.", model="ats", temperature=0, max_output_tokens=60,
                           text={"format": {"type": "json_schema", "name": "person", "schema": schema,
                                            "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)


def test_stored_state_is_refused_by_name():
    try:
        c.responses.create(input="Hi", previous_response_id="resp_123", **GREEDY)
    except openai.BadRequestError as e:
        assert e.body["param"] == "previous_response_id", e.body
    else:
        raise AssertionError("previous_response_id was accepted")


run(globals())
