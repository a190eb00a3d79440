"""What a long-lived client meets: embeddings (the client's default base64
decoded to the model's width, unit length, the same text the same vector),
a second chat turn served from the cache, and n choices."""

import math

from harness import client, run

c = client()


def test_embeddings_are_unit_vectors_and_repeatable():
    r = c.embeddings.create(model="ats", input=["The cat sat.", "Stock prices fell.", "The cat sat."])
    v = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2]
    assert len(v[0]) == len(v[1]) > 0
    for x in v:
        assert abs(math.sqrt(sum(a * a for a in x)) - 1) < 1e-4
    assert max(abs(a - b) for a, b in zip(v[0], v[2])) < 1e-5
    assert r.usage.prompt_tokens > 0
    floats = c.embeddings.create(model="ats", input="The cat sat.", encoding_format="float").data[0].embedding
    assert max(abs(a - b) for a, b in zip(floats, v[0])) < 1e-5


def test_a_second_turn_is_served_from_the_cache():
    first = [{"role": "system", "content": "You are a helpful assistant. " * 8},
             {"role": "user", "content": "Name a colour."}]
    a = c.chat.completions.create(model="ats", messages=first, temperature=0, max_tokens=8)
    second = first + [{"role": "assistant", "content": a.choices[0].message.content},
                      {"role": "user", "content": "And another?"}]
    b = c.chat.completions.create(model="ats", messages=second, temperature=0, max_tokens=8)
    cached = b.usage.prompt_tokens_details.cached_tokens
    # the first turn's prompt, but for its last partial block of the pool (16 tokens)
    assert cached >= a.usage.prompt_tokens - 16, (cached, a.usage.prompt_tokens)
    assert cached < b.usage.prompt_tokens


def test_n_choices_whole_and_streamed():
    msgs = [{"role": "user", "content": "Write a word."}]
    r = c.chat.completions.create(model="ats", messages=msgs, n=3, temperature=1.0, seed=7, max_tokens=6)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert 3 <= r.usage.completion_tokens <= 18, r.usage
    # greedy choices are all the same answer
    g = c.chat.completions.create(model="ats", messages=msgs, n=2, temperature=0, max_tokens=6)
    assert g.choices[0].message.content == g.choices[1].message.content
    # the same seed gives the same choices, streamed or not
    texts = {0: "", 1: "", 2: ""}
    for chunk in c.chat.completions.create(model="ats", messages=msgs, n=3, temperature=1.0, seed=7,
                                           max_tokens=6, stream=True):
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
    assert [texts[i] for i in range(3)] == [ch.message.content for ch in r.choices]


def test_n_completions_count_each_answer():
    r = c.completions.create(model="ats", prompt="Once upon a time", n=2, temperature=0.8, seed=3,
                             max_tokens=5)
    assert [ch.index for ch in r.choices] == [0, 1]
    assert r.usage.completion_tokens <= 10 and r.usage.completion_tokens >= 2


run(globals())
