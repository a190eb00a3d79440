"""Images through the official client on the Qwen2-VL fixture: a chat
message and a Responses input item with the same image answer what the
`vlm` command answers (ATS_VLM_WANT), greedily."""

import base64
import os

from harness import client, run

c = client()
WANT = os.environ["ATS_VLM_WANT"]
with open(os.environ["ATS_IMAGE"], "rb") as f:
    URL = "data:image/png;base64," + base64.b64encode(f.read()).decode()
SETTINGS = dict(model="ats", temperature=0, extra_body={"ignore_eos": True})


def test_chat_with_an_image():
    r = c.chat.completions.create(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": URL}},
        {"type": "text", "text": "Describe the image."}]}], max_tokens=8, **SETTINGS)
    assert r.choices[0].message.content == WANT


def test_responses_with_an_image():
    r = c.responses.create(input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": URL},
        {"type": "input_text", "text": "Describe the image."}]}], max_output_tokens=8, **SETTINGS)
    assert r.output_text == WANT
    # the image was seen before: its tokens come from the cache
    assert r.usage.input_tokens_details.cached_tokens > 0


run(globals())
