// Drives the server's web page in headless Chromium (ats-cli/tests/web_page.rs
// starts the server and runs this): the page loads, a typed message gets a
// streamed answer equal to the API's at temperature 0, an uploaded image gets
// one too (when the server reads images), the placement grid has a cell per
// weight tensor where the plan puts it, the memory bars and the rounds chart
// draw. Saves a screenshot; prints one JSON line of findings; exits non-zero
// on the first failed check.
//
// usage: node page.mjs BASE_URL SCREENSHOT.png EXPECT [IMAGE.png]
//   EXPECT: "split" (some tensors on the GPU, some on the CPU) or "cpu"
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [base, screenshot, expect, imagePath] = process.argv.slice(2);
const CHROMIUM = process.env.ATS_CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 20000;

// Never outlive the test's bound, whatever hangs.
const guard = setTimeout(() => {
  console.error("page test: over 60 s, giving up");
  process.exit(3);
}, 60000);

function check(ok, what) {
  if (!ok) throw new Error(`check failed: ${what}`);
}

async function api(path, body) {
  const r = await fetch(base + path, body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  check(r.ok, `${path} answered ${r.status}`);
  return r.json();
}

/** Types `text`, sends it, waits for the streamed answer; returns it. */
async function chatTurn(page, text) {
  const before = await page.locator(".msg.assistant").count();
  await page.fill("#prompt", text);
  await page.click("#send");
  const bubble = page.locator(".msg.assistant").nth(before);
  await bubble.waitFor({ timeout: STEP_MS });
  await page.waitForFunction((i) => {
    const b = document.querySelectorAll(".msg.assistant")[i];
    return b && b.dataset.done === "1";
  }, before, { timeout: STEP_MS });
  const errors = await bubble.locator(".meta.error").allTextContents();
  check(errors.length === 0, `the answer failed: ${errors.join("; ")}`);
  return {
    text: await bubble.locator(".content").textContent(),
    chunks: Number(await bubble.getAttribute("data-chunks")),
  };
}

/** The API's answer to the same messages, not streamed. */
async function direct(messages) {
  const v = await api("/v1/chat/completions", { messages, temperature: 0, max_tokens: 8 });
  return v.choices[0].message.content;
}

/** The grid's cells against the plan: one per tensor, where the plan says. */
async function checkPlacement(page) {
  const st = await api("/v1/ats/state");
  const tensors = st.plan.tensors;
  await page.waitForFunction((n) => document.querySelectorAll("#placement rect.cell").length === n, tensors.length, { timeout: STEP_MS });
  const cells = await page.$$eval("#placement rect.cell", (rs) => rs.map((r) => [r.dataset.tensor, r.dataset.where]));
  const drawn = new Map(cells);
  for (const t of tensors) {
    const want = t.placement === "gpu" ? "gpu" : t.region === "temp" ? "temp" : "cpu";
    check(drawn.get(t.name) === want, `${t.name} drawn ${drawn.get(t.name)}, the plan says ${want}`);
  }
  const where = cells.map((c) => c[1]);
  if (expect === "split") check(where.includes("gpu") && where.includes("cpu"), `a split, got ${[...new Set(where)]}`);
  else check(where.every((w) => w === "cpu"), `all on the CPU, got ${[...new Set(where)]}`);
  const devices = await page.$$eval("#memory rect.segment[data-device]", (rs) => [...new Set(rs.map((r) => r.dataset.device))]);
  const used = st.devices.filter((d) => d.used_bytes > 0).map((d) => d.device);
  for (const d of used) check(devices.includes(d), `a memory bar for ${d}, drawn: ${devices}`);
  return { cells: cells.length, where: Object.fromEntries(["gpu", "temp", "cpu"].map((k) => [k, where.filter((w) => w === k).length])) };
}

async function run(page) {
  await page.goto(base + "/", { timeout: STEP_MS });
  await page.waitForSelector("#link-state.ok", { timeout: STEP_MS });
  const found = { placement: await checkPlacement(page) };
  await page.fill("#max-tokens", "8");
  await page.fill("#temperature", "0");

  const turn = await chatTurn(page, "the license grants");
  check(turn.text.length > 0, "a non-empty answer");
  check(turn.chunks > 1, `streamed in pieces (${turn.chunks})`);
  const want = await direct([{ role: "user", content: "the license grants" }]);
  check(turn.text === want, `the page's answer ${JSON.stringify(turn.text)} is the API's ${JSON.stringify(want)}`);
  found.text = turn;

  const imageInput = await page.locator("#image-label").isVisible();
  if (imagePath) {
    check(imageInput, "an image upload on a server that reads images");
    await page.click("#new-chat");
    await page.setInputFiles("#image-input", imagePath);
    await page.waitForSelector("#attachments img", { timeout: STEP_MS });
    const image = await chatTurn(page, "Describe this image.");
    check(image.text.length > 0, "a description");
    const url = `data:image/png;base64,${readFileSync(imagePath).toString("base64")}`;
    const wantImage = await direct([{ role: "user", content: [
      { type: "text", text: "Describe this image." },
      { type: "image_url", image_url: { url } },
    ] }]);
    check(image.text === wantImage, `the page's description ${JSON.stringify(image.text)} is the API's ${JSON.stringify(wantImage)}`);
    found.image = image;
  } else {
    check(!imageInput, "no image upload on a server without a projector");
  }

  // the rounds the engine ran since, drawn as bars
  const st = await api("/v1/ats/state");
  await page.waitForFunction((n) => document.querySelectorAll("#rounds rect.round").length >= n, Math.min(st.rounds.length, 120), { timeout: STEP_MS });
  found.rounds = await page.locator("#rounds rect.round").count();
  check(found.rounds > 0, "rounds drawn");
  return found;
}

const profile = mkdtempSync(join(tmpdir(), "ats-page-"));
let context;
let failed = null;
try {
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] || (await context.newPage());
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  try {
    const found = await run(page);
    check(consoleErrors.length === 0, `no errors in the page: ${consoleErrors.join("; ")}`);
    console.log(JSON.stringify(found));
  } catch (e) {
    failed = e;
  }
  await page.screenshot({ path: screenshot, fullPage: true }).catch((e) => console.error(`no screenshot: ${e}`));
} catch (e) {
  failed = e;
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(guard);
}
if (failed) {
  console.error(`page test: ${failed.stack || failed}`);
  process.exit(1);
}
