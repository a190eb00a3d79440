// The page's chat and its polling of the engine state. A chat turn is one
// streamed /v1/chat/completions request carrying the whole conversation;
// images become data-URL image_url parts when the server reads images.
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;

const chat = {
  messages: [], // the conversation as the API takes it
  images: [], // data URLs attached to the next message
  controller: null, // aborts the running answer
  readsImages: false,
  kept: 120,
};

/** A message bubble; its text is only ever set as text, never as markup. */
function bubble(role, body) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  const content = document.createElement("div");
  content.className = "content";
  content.textContent = body || "";
  div.appendChild(content);
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function note(div, s, isError) {
  const p = document.createElement("div");
  p.className = isError ? "meta error" : "meta";
  p.textContent = s;
  div.appendChild(p);
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

/** The server-sent events in `buffer`: complete ones parsed, the rest kept. */
function takeEvents(buffer) {
  const events = [];
  let at;
  while ((at = buffer.search(/\r?\n\r?\n/)) >= 0) {
    const block = buffer.slice(0, at);
    buffer = buffer.slice(at).replace(/^\r?\n\r?\n/, "");
    const data = block
      .split(/\r?\n/)
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).replace(/^ /, ""))
      .join("\n");
    if (data) events.push(data);
  }
  return { events, rest: buffer };
}

/** Sends the conversation and streams the answer into a new bubble. */
async function send(text) {
  const content = chat.images.length
    ? [{ type: "text", text }, ...chat.images.map((url) => ({ type: "image_url", image_url: { url } }))]
    : text;
  const user = bubble("user", text);
  for (const url of chat.images) {
    const img = document.createElement("img");
    img.src = url;
    img.alt = "attached image";
    user.appendChild(img);
  }
  chat.messages.push({ role: "user", content });
  chat.images = [];
  $("attachments").replaceChildren();
  const out = bubble("assistant", "");
  out.dataset.done = "0";
  const answer = await stream(out);
  if (answer !== null) chat.messages.push({ role: "assistant", content: answer });
  out.dataset.done = "1";
}

function requestBody() {
  const body = {
    messages: chat.messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  const maxTokens = parseInt($("max-tokens").value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  const temp = parseFloat($("temperature").value);
  if (Number.isFinite(temp)) body.temperature = temp;
  return body;
}

/** Reads one answer's stream into `out`: its text, or null on failure. */
async function stream(out) {
  const target = out.querySelector(".content");
  chat.controller = new AbortController();
  setBusy(true);
  let text = "";
  let chunks = 0;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(requestBody()),
      signal: chat.controller.signal,
    });
    if (!r.ok) {
      const err = await r.json().catch(() => ({}));
      note(out, `refused (${r.status}): ${(err.error && err.error.message) || r.statusText}`, true);
      chat.messages.pop();
      return null;
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const got = takeEvents(buffer);
      buffer = got.rest;
      for (const data of got.events) {
        if (data === "[DONE]") continue;
        const ev = JSON.parse(data);
        if (ev.error) throw new Error(ev.error.message);
        const delta = ev.choices && ev.choices[0] && ev.choices[0].delta;
        if (delta && delta.content) {
          text += delta.content;
          chunks += 1;
          target.textContent = text;
          out.dataset.chunks = String(chunks);
        }
        if (ev.usage) note(out, usageLine(ev.usage, ev.timings));
        if (ev.timings) out.dataset.tps = String(ev.timings.predicted_per_second || 0);
      }
    }
    return text;
  } catch (e) {
    note(out, e.name === "AbortError" ? "stopped" : `failed: ${e.message}`, e.name !== "AbortError");
    return e.name === "AbortError" ? text : null;
  } finally {
    chat.controller = null;
    setBusy(false);
    out.scrollIntoView({ block: "end" });
  }
}

function usageLine(u, t) {
  const cached = (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0;
  let s = `${u.prompt_tokens} prompt tokens (${cached} cached), ${u.completion_tokens} generated`;
  if (t && t.predicted_per_second) s += `, ${t.predicted_per_second.toFixed(1)} tok/s`;
  return s;
}

/** Reads the chosen files as data URLs for the next message. */
function attach(files) {
  for (const f of files) {
    const reader = new FileReader();
    reader.onload = () => {
      chat.images.push(reader.result);
      const img = document.createElement("img");
      img.src = reader.result;
      img.alt = f.name;
      img.title = f.name;
      $("attachments").appendChild(img);
    };
    reader.readAsDataURL(f);
  }
}

/** Draws the engine state; schedules the next poll. */
async function poll() {
  try {
    const r = await fetch("/v1/ats/state", { cache: "no-store" });
    if (!r.ok) throw new Error(`status ${r.status}`);
    draw(await r.json());
    $("link-state").className = "dot ok";
  } catch (e) {
    $("link-state").className = "dot down";
    $("link-state").title = `the server does not answer: ${e.message}`;
  }
  setTimeout(poll, POLL_MS);
}

function draw(st) {
  const m = st.model;
  $("model-facts").textContent = `${m.arch}, ${m.n_layer} layers, ${AtsViews.bytes(m.bytes)}, context ${m.n_ctx}, ${m.parallel} at once`;
  setImages(m.images);
  if (st.plan) {
    const c = AtsViews.placement($("placement"), st.plan);
    const budget = st.plan.budget_bytes ? `GPU budget ${AtsViews.bytes(st.plan.budget_bytes)}, plan peak ${AtsViews.bytes(st.plan.peak_bytes)}` : "no GPU: every tensor on the CPU";
    $("placement-summary").textContent = `${st.plan.policy} policy; ${budget}`;
    $("placement").dataset.cells = String(c.gpu[0] + c.temp[0] + c.cpu[0]);
  }
  AtsViews.memory($("memory"), st.devices, Object.assign({ block_tokens: st.pool.block_tokens }, st.pool));
  const speeds = AtsViews.rounds($("rounds"), st.rounds, chat.kept);
  $("rounds").dataset.rounds = String(st.rounds.length);
  const last = st.rounds[st.rounds.length - 1];
  $("rounds-summary").textContent = last
    ? `last: tier ${last.tier}, ${last.plan}, ${speeds[speeds.length - 1].toFixed(1)} tok/s; re-plans ${st.replans.replans}`
    : "";
  const q = st.requests;
  $("requests").textContent = `requests: ${q.running} running, ${q.queued} queued (of ${q.capacity}), ${q.served} served, ${q.failed} failed; tokens: ${q.prompt_tokens} prompt (${q.cached_tokens} cached), ${q.generated_tokens} generated`;
}

function setImages(on) {
  chat.readsImages = !!on;
  $("image-label").hidden = !on;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models");
    const v = await r.json();
    $("model-name").textContent = v.data[0].id;
    document.title = `ATS · ${v.data[0].id}`;
  } catch (e) {
    $("model-name").textContent = "no answer from the server";
  }
}

function submit(ev) {
  ev.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || chat.controller) return;
  $("prompt").value = "";
  send(text);
}

function start() {
  $("composer").addEventListener("submit", submit);
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) submit(ev);
  });
  $("stop").addEventListener("click", () => chat.controller && chat.controller.abort());
  $("new-chat").addEventListener("click", () => {
    if (chat.controller) chat.controller.abort();
    chat.messages = [];
    $("messages").replaceChildren();
  });
  $("image-input").addEventListener("change", (ev) => {
    attach(ev.target.files);
    ev.target.value = "";
  });
  loadModel();
  poll();
}

start();
