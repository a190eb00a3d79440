"""logprobs through the official client: chat and completions, streamed and
not; the log-probabilities are of the model's distribution (at most 0, the
chosen token among the alternatives when greedy, most likely first)."""

import math

from harness import client, run


def check_chat_logprobs(content_logprobs, top):
    assert content_logprobs, "no logprobs"
    for t in content_logprobs:
        assert t.logprob <= 0.0 and math.isfinite(t.logprob), t
        assert t.bytes and bytes(t.bytes).decode("utf-8", "replace") == t.token, t
        assert len(t.top_logprobs) == top, t
        lps = [a.logprob for a in t.top_logprobs]
        assert lps == sorted(lps, reverse=True), lps
        # greedy: the chosen token is the most likely one
        assert t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5, t


def test_chat_logprobs_whole_and_streamed_agree():
    c = client()
    args = dict(model="ats", messages=[{"role": "user", "content": "Name a colour."}],
                max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
    r = c.chat.completions.create(**args)
    whole = r.choices[0].logprobs.content
    check_chat_logprobs(whole, 3)
    assert "".join(t.token for t in whole) == r.choices[0].message.content
    streamed = []
    for chunk in c.chat.completions.create(stream=True, **args):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.content
    assert [t.token for t in streamed] == [t.token for t in whole]
    assert all(abs(a.logprob - b.logprob) < 1e-5 for a, b in zip(streamed, whole))


def test_chat_without_logprobs_has_none():
    r = client().chat.completions.create(model="ats", messages=[{"role": "user", "content": "Hi"}],
                                         max_tokens=4, temperature=0)
    assert r.choices[0].logprobs is None


def test_completion_logprobs():
    c = client()
    r = c.completions.create(model="ats", prompt="The capital of France is", max_tokens=6,
                             temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) > 0
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0.0
        assert len(top) <= 2 and tok in top, (tok, top)
    streamed = []
    for chunk in c.completions.create(model="ats", prompt="The capital of France is", max_tokens=6,
                                      temperature=0, logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.tokens
    assert streamed == lp.tokens


run(globals())
