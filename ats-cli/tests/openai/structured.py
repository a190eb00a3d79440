"""response_format through the official client: answers to json_schema
parse and validate, json_object answers are objects, and a schema that
cannot be enforced is a 400 that names the problem."""

import json

import jsonschema
import openai

from harness import client, run

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
        "role": {"enum": ["student", "teacher", "engineer"]},
    },
    "required": ["name", "age", "languages", "role"],
    "additionalProperties": False,
}


def ask(content, response_format, stream=False, **kw):
    c = client()
    args = dict(model="ats", messages=[{"role": "user", "content": content}],
                response_format=response_format, max_tokens=200, **{"temperature": 0, **kw})
    if not stream:
        r = c.chat.completions.create(**args)
        assert r.choices[0].finish_reason == "stop", r
        return r.choices[0].message.content
    text, finish = "", None
    for chunk in c.chat.completions.create(stream=True, **args):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop", finish
    return text


def test_json_schema_answers_parse_and_validate():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
    for prompt in ["Describe a made-up person as JSON.", "Who teaches you maths? Answer in JSON."]:
        answer = json.loads(ask(prompt, fmt))
        jsonschema.validate(answer, PERSON)


def test_json_schema_streamed_equals_whole():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
    whole = ask("Describe an engineer as JSON.", fmt)
    assert ask("Describe an engineer as JSON.", fmt, stream=True) == whole
    jsonschema.validate(json.loads(whole), PERSON)


def test_json_schema_with_sampling_still_validates():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    for seed in range(3):
        answer = json.loads(ask("A person, as JSON.", fmt, seed=seed, temperature=1.0))
        jsonschema.validate(answer, PERSON)


def test_json_object_is_an_object():
    answer = json.loads(ask("List three colours as a JSON object.", {"type": "json_object"}))
    assert isinstance(answer, dict), answer


def test_a_bad_schema_is_a_400_naming_the_problem():
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}
    try:
        ask("hi", bad)
    except openai.BadRequestError as e:
        assert e.status_code == 400
        assert "objekt" in e.message, e.message
        assert e.body["param"] == "response_format", e.body
    else:
        raise AssertionError("a bad schema was accepted")
    missing = {"type": "json_schema", "json_schema": {"name": "x"}}
    try:
        ask("hi", missing)
    except openai.BadRequestError as e:
        assert "schema" in e.message, e.message
    else:
        raise AssertionError("a json_schema without a schema was accepted")


run(globals())
