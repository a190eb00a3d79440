#!/usr/bin/env python3
"""A bounded load generator for OpenAI-compatible servers (standard library
only): streamed greedy chat requests from C concurrent clients, each
answer exactly --tokens tokens long (ignore_eos), reporting the aggregate
generated tokens/s over the wall time and the time to the first content
token (TTFT) p50/p95; and a second chat turn's TTFT against its first.

    bench-serve.py URL --clients 1,4,8,16 [--system 500] [--per-client 3]
                       [--tokens 32] [--label NAME] [--turns]

Prints one JSON object per measurement on stdout."""

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("time person year way day thing man world life hand part child eye woman place work week "
         "case point government company number group problem fact").split()


def system_prompt(tokens, seed):
    # about one token per word for these common words
    rnd = random.Random(seed)
    return "You are a helpful assistant. Notes: " + " ".join(rnd.choice(WORDS) for _ in range(tokens))


def stream_chat(url, messages, max_tokens):
    """Sends one streamed chat; returns (ttft seconds, content tokens seen, text)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
    ttft, chunks, text, usage = None, 0, "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                chunks += 1
                text += piece
    conn.close()
    n = usage["completion_tokens"] if usage else chunks
    return ttft, n, text


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def load(url, clients, per_client, tokens, system, seed):
    """C clients, each sending `per_client` requests one after another."""
    sys_text = system_prompt(system, seed) if system else None
    ttfts, counts, errors = [], [], []
    lock = threading.Lock()

    def client(i):
        for j in range(per_client):
            msgs = ([{"role": "system", "content": sys_text}] if sys_text else []) + [
                {"role": "user", "content": f"Question {seed}-{i}-{j}: write about {WORDS[(i + j) % len(WORDS)]}."}]
            try:
                ttft, n, _ = stream_chat(url, msgs, tokens)
                with lock:
                    ttfts.append(ttft)
                    counts.append(n)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "system_tokens": system, "requests": len(counts), "errors": errors[:3],
            "n_errors": len(errors), "wall_s": round(wall, 3), "agg_tps": round(sum(counts) / wall, 2),
            "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1) if ttfts else None,
            "ttft_p95_ms": round(1000 * pct(ttfts, 95), 1) if ttfts else None}


def turns(url, system, tokens, seed):
    """One conversation of two turns with a fresh system prompt: TTFT of each."""
    msgs = [{"role": "system", "content": system_prompt(system, seed)},
            {"role": "user", "content": "Name three colours."}]
    t1, _, text = stream_chat(url, msgs, tokens)
    msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": "And three animals?"}]
    t2, _, _ = stream_chat(url, msgs, tokens)
    return {"turns": True, "system_tokens": system, "ttft1_ms": round(1000 * t1, 1),
            "ttft2_ms": round(1000 * t2, 1), "speedup": round(t1 / t2, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--per-client", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--system", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--turns", action="store_true")
    a = ap.parse_args()
    if a.turns:
        r = turns(a.url, a.system or 500, a.tokens, a.seed)
        r["label"] = a.label
        print(json.dumps(r), flush=True)
        return
    for c in [int(x) for x in a.clients.split(",")]:
        r = load(a.url, c, a.per_client, a.tokens, a.system, a.seed)
        r["label"] = a.label
        print(json.dumps(r), flush=True)
        if r["n_errors"]:
            print(f"errors: {r['errors']}", file=sys.stderr)


if __name__ == "__main__":
    main()
