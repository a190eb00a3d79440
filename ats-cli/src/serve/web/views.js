// The engine pictures, drawn as SVG from /v1/ats/state: where each weight
// tensor sits (a grid of layers by tensor role), each device's ledger by
// region against its budget, the KV pool, and the recent rounds' speed,
// plan and tier. Every function replaces its container's content.
"use strict";

const AtsViews = (() => {
  const NS = "http://www.w3.org/2000/svg";

  // One colour per place and per ledger region; the page's legends use them.
  const WHERE = { gpu: "#2e9e5b", temp: "#e6a23c", cpu: "#8a9bb0" };
  const WHERE_NAME = { gpu: "on the GPU", temp: "streamed to the GPU", cpu: "on the CPU" };
  const REGION = {
    resident: "#2e9e5b", kv: "#4a78c2", temp: "#e6a23c",
    compute: "#a05cc4", vision: "#d9607a", workspace: "#7a7a7a",
  };
  const PLAN = {
    "gpu-only": "#2e9e5b", static: "#4a78c2", dynamic: "#e6a23c",
    "cpu-only": "#8a9bb0", none: "#cccccc",
  };

  function el(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function text(parent, x, y, s, attrs) {
    const t = el("text", Object.assign({ x, y }, attrs || {}), parent);
    t.textContent = s;
    return t;
  }

  // A tooltip: SVG's own <title> child.
  function tip(parent, s) {
    el("title", {}, parent).textContent = s;
  }

  function svg(container, w, h, label) {
    container.replaceChildren();
    return el("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img", "aria-label": label }, container);
  }

  /** Decimal units, as --vram reads them. */
  function bytes(n) {
    if (n == null) return "unbounded";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
    return `${n >= 100 || i === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
  }

  function where(t) {
    if (t.placement === "gpu") return "gpu";
    return t.region === "temp" ? "temp" : "cpu";
  }

  // Tensors by layer and role; those before the first block and after the
  // last are the model's input and output rows.
  function grid(tensors) {
    const layers = new Map();
    const roles = [];
    const input = [];
    const output = [];
    for (const t of tensors) {
      const m = /^blk\.(\d+)\.(.+?)(\.weight)?$/.exec(t.name);
      if (!m) {
        (layers.size ? output : input).push(t);
        continue;
      }
      const layer = Number(m[1]);
      const role = m[2];
      if (!roles.includes(role)) roles.push(role);
      if (!layers.has(layer)) layers.set(layer, new Map());
      layers.get(layer).set(role, t);
    }
    const order = [...layers.keys()].sort((a, b) => a - b);
    return { layers, order, roles, input, output };
  }

  /** The placement grid: a row per layer, a column per tensor role. */
  function placement(container, plan) {
    const g = grid(plan.tensors);
    const left = 46, top = 86, width = 560;
    const cw = Math.max(9, Math.min(30, Math.floor((width - left - 10) / Math.max(1, g.roles.length))));
    const rows = g.order.length + (g.input.length ? 1 : 0) + (g.output.length ? 1 : 0);
    const rh = Math.max(3, Math.min(16, Math.floor(420 / Math.max(1, rows))));
    const h = top + rows * rh + 40;
    const s = svg(container, width, h, "where each weight tensor sits, by layer and role");
    g.roles.forEach((r, i) => {
      const x = left + i * cw + cw / 2;
      text(s, x, top - 6, r, { transform: `rotate(-60 ${x} ${top - 6})`, class: "axis" });
    });
    const count = { gpu: [0, 0], temp: [0, 0], cpu: [0, 0] };
    const cell = (t, x, y, w) => {
      const k = where(t);
      count[k][0] += 1;
      count[k][1] += t.bytes;
      const r = el("rect", {
        x, y, width: w - 1, height: Math.max(1, rh - 1), fill: WHERE[k],
        class: "cell", "data-tensor": t.name, "data-where": k,
      }, s);
      tip(r, `${t.name}: ${WHERE_NAME[k]}, ${bytes(t.bytes)}\n${t.why}`);
    };
    const labelEvery = Math.ceil(11 / rh);
    let y = top;
    const extraRow = (label, ts) => {
      if (!ts.length) return;
      text(s, left - 6, y + rh - 2, label, { class: "axis", "text-anchor": "end" });
      ts.forEach((t, i) => cell(t, left + i * cw, y, cw));
      text(s, left + ts.length * cw + 6, y + rh - 2, ts.map((t) => t.name.replace(/\.weight$/, "")).join(" · "), { class: "axis" });
      y += rh;
    };
    extraRow("in", g.input);
    g.order.forEach((layer, i) => {
      if (i % labelEvery === 0) text(s, left - 6, y + rh - 1, String(layer), { class: "axis", "text-anchor": "end" });
      g.roles.forEach((role, j) => {
        const t = g.layers.get(layer).get(role);
        if (t) cell(t, left + j * cw, y, cw);
      });
      y += rh;
    });
    extraRow("out", g.output);
    legend(s, 0, y + 14, Object.keys(WHERE).map((k) => [WHERE[k], `${WHERE_NAME[k]}: ${count[k][0]} (${bytes(count[k][1])})`]));
    return count;
  }

  function legend(s, x, y, entries) {
    for (const [colour, label] of entries) {
      el("rect", { x, y: y - 9, width: 10, height: 10, fill: colour }, s);
      const t = text(s, x + 14, y, label, { class: "legend" });
      x += 22 + Math.max(40, label.length * 6.2);
      void t;
    }
  }

  /** Each device's ledger by region against its budget, and the KV pool. */
  function memory(container, devices, pool) {
    const width = 560, barX = 110, barW = 260, rowH = 34;
    const h = devices.length * rowH + rowH + 30;
    const s = svg(container, width, h, "each device's memory by region against its budget");
    devices.forEach((d, i) => {
      const y = i * rowH + 6;
      text(s, 0, y + 14, `${d.role} · ${d.device}`, { class: "axis" });
      const scale = d.budget_bytes || Math.max(d.used_bytes, d.peak_bytes, 1);
      el("rect", { x: barX, y, width: barW, height: 18, class: "track" }, s);
      let x = barX;
      for (const [region, n] of d.regions) {
        if (!n) continue;
        const w = Math.max(1, (n / scale) * barW);
        const r = el("rect", {
          x, y, width: w, height: 18, fill: REGION[region] || "#999",
          class: "segment", "data-device": d.device, "data-region": region,
        }, s);
        tip(r, `${d.device} ${region}: ${bytes(n)}`);
        x += w;
      }
      const px = barX + Math.min(1, d.peak_bytes / scale) * barW;
      el("line", { x1: px, x2: px, y1: y - 3, y2: y + 21, class: "peak" }, s);
      const limit = d.budget_bytes ? `of ${bytes(d.budget_bytes)}` : "(no budget)";
      text(s, barX + barW + 8, y + 14, `${bytes(d.used_bytes)} ${limit}, peak ${bytes(d.peak_bytes)}`, { class: "axis" });
    });
    const y = devices.length * rowH + 6;
    poolBar(s, pool, barX, y, barW);
    const regions = Object.keys(REGION).map((k) => [REGION[k], k]);
    legend(s, 0, h - 6, regions.concat([["#333", "┆ peak"]]));
  }

  function poolBar(s, pool, x, y, w) {
    text(s, 0, y + 14, "KV pool", { class: "axis" });
    el("rect", { x, y, width: w, height: 18, class: "track" }, s);
    const total = Math.max(1, pool.blocks);
    const held = (pool.held / total) * w;
    const cached = (pool.cached / total) * w;
    el("rect", { x, y, width: held, height: 18, fill: REGION.kv, class: "segment", "data-pool": "held" }, s);
    el("rect", { x: x + held, y, width: cached, height: 18, fill: "#9db7e0", class: "segment", "data-pool": "cached" }, s);
    text(s, x + w + 8, y + 14, `${pool.held} held, ${pool.cached} cached / ${pool.blocks} × ${pool.block_tokens} tokens`, { class: "axis" });
  }

  /** The last rounds: bars of tokens per second coloured by plan, and their tiers. */
  function rounds(container, list, kept) {
    const width = 560, left = 46, plotW = 500, plotH = 110, tierH = 16;
    const h = plotH + tierH + 52;
    const s = svg(container, width, h, "the recent rounds: tokens per second, plan and tier");
    const speeds = list.map((r) => (r.secs > 0 ? (r.prompt_tokens + r.decode_tokens) / r.secs : 0));
    const top = Math.max(1, ...speeds);
    const bw = plotW / Math.max(kept, list.length, 1);
    const x0 = left + plotW - list.length * bw;
    el("line", { x1: left, x2: left + plotW, y1: plotH, y2: plotH, class: "baseline" }, s);
    text(s, left - 6, 10, `${top.toFixed(0)}`, { class: "axis", "text-anchor": "end" });
    text(s, left - 6, 22, "tok/s", { class: "axis", "text-anchor": "end" });
    const maxTier = Math.max(1, ...list.map((r) => r.tier));
    list.forEach((r, i) => {
      const bh = Math.max(1, (speeds[i] / top) * (plotH - 4));
      const x = x0 + i * bw;
      const bar = el("rect", {
        x, y: plotH - bh, width: Math.max(1, bw - 0.5), height: bh,
        fill: PLAN[r.plan] || PLAN.none, class: "round", "data-plan": r.plan, "data-tier": r.tier,
      }, s);
      const what = `${r.sequences} sequence(s), ${r.prompt_tokens} prompt + ${r.decode_tokens} decode tokens`;
      tip(bar, `${what}\ntier ${r.tier}, ${r.plan} plan, ${speeds[i].toFixed(1)} tok/s, ${(r.secs * 1000).toFixed(1)} ms`);
      // the tier strip: darker for larger tiers (log scale)
      const shade = Math.log2(r.tier || 1) / Math.max(1, Math.log2(maxTier));
      const cell = el("rect", {
        x, y: plotH + 4, width: Math.max(1, bw - 0.5), height: tierH,
        fill: `rgba(60, 60, 90, ${0.15 + 0.75 * shade})`, class: "tier",
      }, s);
      tip(cell, `tier ${r.tier}`);
    });
    text(s, left - 6, plotH + 4 + tierH - 4, "tier", { class: "axis", "text-anchor": "end" });
    if (list.length) {
      text(s, left, plotH + tierH + 18, `tiers ${[...new Set(list.map((r) => r.tier))].sort((a, b) => a - b).join(", ")}; darker: larger`, { class: "axis" });
    } else {
      text(s, left + 8, plotH / 2, "no rounds yet: send a message", { class: "axis" });
    }
    legend(s, 0, h - 4, Object.keys(PLAN).filter((k) => k !== "none").map((k) => [PLAN[k], k]));
    return speeds;
  }

  return { placement, memory, rounds, bytes };
})();
