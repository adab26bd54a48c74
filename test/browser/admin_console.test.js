// The admin console page in a real browser: starts three rpclb-node processes with an admin
// listener, a token and balancer `w`, opens the page of node a in Debian's chromium (driven
// by puppeteer-core) with #token=..., and checks that it shows the three nodes and w's
// members, that Drain on node b (confirmed in the page's dialog) takes b out of w's members,
// that Undrain puts it back, that the change-algorithm dialog reaches the node and shows its
// answer, and that Stop ends node c. Saves screenshots to $RPCLB_BROWSER_OUT.
//
// Environment (test/CMakeLists.txt sets it): RPCLB_BIN_DIR (rpclb-node), RPCLB_PLUGIN_PATH,
// RPCLB_BROWSER_OUT (screenshots and node logs), RPCLB_CHROMIUM (default /usr/bin/chromium).
// Exits 0 when every check passed, 1 otherwise; every process it started is gone by then.
"use strict";

const { spawn } = require("node:child_process");
const crypto = require("node:crypto");
const fs = require("node:fs");
const http = require("node:http");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const TEST_DEADLINE_MS = 50000;  // under CTest's 90 s, so the clean-up always runs
const WAIT_MS = 10000;           // any one condition
const chromiumPath = process.env.RPCLB_CHROMIUM || "/usr/bin/chromium";
const binDir = process.env.RPCLB_BIN_DIR;
const outDir = process.env.RPCLB_BROWSER_OUT || fs.mkdtempSync(path.join(os.tmpdir(), "rpclb-browser-"));
const token = crypto.randomBytes(18).toString("hex");
const cookie = crypto.randomBytes(18).toString("hex");

function fail(message) {
  throw new Error(message);
}

// ---- rpclb-node processes --------------------------------------------------------------------
const nodes = [];  // {name, child, lines, exited, log}

// Starts a node and resolves once it printed its admin and listening addresses.
function startNode(name, seed) {
  const args = ["--name", `${name}@127.0.0.1`, "--listen", "127.0.0.1:0", "--balancer", "w=round_robin",
    "--admin", "127.0.0.1:0"];
  if (seed) args.push("--seed", seed);
  const log = path.join(outDir, `${name}.log`);
  const child = spawn(path.join(binDir, "rpclb-node"), args, {
    env: { ...process.env, RPCLB_COOKIE: cookie, RPCLB_ADMIN_TOKEN: token },
    stdio: ["ignore", "pipe", fs.openSync(log, "w")],
  });
  const node = { name: `${name}@127.0.0.1`, child, lines: [], exited: null, log };
  nodes.push(node);
  let partial = "";
  child.stdout.on("data", (chunk) => {
    const parts = (partial + chunk).split("\n");
    partial = parts.pop();
    node.lines.push(...parts);
  });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  exited.then((status) => { node.exited = status; });
  node.reaped = exited;
  return waitFor(`${name} prints its addresses`, () => {
    if (node.exited !== null) fail(`${name} exited with ${node.exited}; log:\n${fs.readFileSync(log, "utf8")}`);
    const admin = node.lines.find((l) => l.startsWith("admin on "));
    const listen = node.lines.find((l) => l.startsWith("listening on "));
    if (!admin || !listen) return false;
    node.admin = admin.slice("admin on ".length);
    node.listen = listen.slice("listening on ".length);
    return true;
  }).then(() => node);
}

// SIGKILL and reap every node still running.
async function stopNodes() {
  for (const n of nodes) if (n.exited === null) n.child.kill("SIGKILL");
  await Promise.all(nodes.map((n) => n.reaped));
}

// ---- waiting -----------------------------------------------------------------------------------
async function waitFor(what, condition, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) fail(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function get(address, target) {
  return new Promise((resolve, reject) => {
    const [host, port] = address.split(":");
    http.get({ host, port, path: target }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { body += c; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body }));
    }).on("error", reject);
  });
}

// ---- the checks --------------------------------------------------------------------------------
async function checkAssets(admin) {
  const expect = [
    ["/", 200, "text/html; charset=utf-8", "<title>rpclb console</title>"],
    ["/dialog.js", 200, "text/javascript; charset=utf-8", "function confirmDialog"],
    ["/console.js", 200, "text/javascript; charset=utf-8", "balancer_set_algorithm"],
    ["/console.css", 200, "text/css; charset=utf-8", ".members"],
    ["/uplot.min.js", 200, "text/javascript; charset=utf-8", "uPlot"],
    ["/uplot.min.css", 200, "text/css; charset=utf-8", ".uplot"],
    ["/index.html", 404, "text/plain; charset=utf-8", "not found"],
    ["/uplot.js", 404, "text/plain; charset=utf-8", "not found"],
  ];
  for (const [target, status, type, text] of expect) {
    const r = await get(admin, target);
    if (r.status !== status || r.headers["content-type"] !== type || !r.body.includes(text))
      fail(`GET ${target}: expected ${status} ${type} containing ${JSON.stringify(text)}, got ${r.status} ` +
        `${r.headers["content-type"]}: ${r.body.slice(0, 200)}`);
  }
  const page = await get(admin, "/");
  if (!(page.headers["content-security-policy"] || "").includes("frame-ancestors 'none'"))
    fail("GET / has no Content-Security-Policy with frame-ancestors 'none'");

  // HEAD gives the GET's headers and no body: the next answer on the connection follows at once.
  const size = (await get(admin, "/uplot.min.js")).body.length;
  const both = await raw(admin, "HEAD /uplot.min.js HTTP/1.1\r\nHost: x\r\n\r\n" +
    "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const answers = both.split(/(?=HTTP\/1\.1 )/);
  if (answers.length !== 2 || !answers[0].includes(`Content-Length: ${size}\r\n`) || !answers[0].endsWith("\r\n\r\n") ||
      !answers[1].startsWith("HTTP/1.1 200") || !answers[1].endsWith("\r\n\r\nok\n"))
    fail(`HEAD /uplot.min.js then GET /healthz on one connection gave:\n${both.slice(0, 1000)}`);
}

// Sends `text` on a new connection and resolves with all it reads until the server closes.
function raw(address, text) {
  return new Promise((resolve, reject) => {
    const [host, port] = address.split(":");
    const socket = net.connect(+port, host, () => socket.end(text));
    let got = "";
    socket.setEncoding("latin1");
    socket.on("data", (c) => { got += c; });
    socket.on("end", () => resolve(got));
    socket.on("error", reject);
  });
}

// What the test is doing now, for the failure message and the progress log.
let current = "checking what the test needs";
const t0 = Date.now();
function step(what) {
  current = what;
  console.log(`${((Date.now() - t0) / 1000).toFixed(1).padStart(5)} s  ${what}`);
}

// The texts of a selector's elements.
const texts = (page, selector) => page.$$eval(selector, (es) => es.map((e) => e.textContent.trim()));

async function run(puppeteer) {
  step("starting the cluster");
  const a = await startNode("a");
  const b = await startNode("b", a.listen);
  const c = await startNode("c", a.listen);
  const all = [a.name, b.name, c.name].sort();
  step("checking the page's files over plain HTTP");
  await checkAssets(a.admin);

  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "rpclb-chromium-"));
  const browser = await puppeteer.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", `--user-data-dir=${profile}`],
  });
  try {
    // Without #token= the page asks for the token, and says so when the node refuses one.
    step("opening the page without a token");
    const bare = await browser.newPage();
    bare.setDefaultTimeout(WAIT_MS);
    await bare.goto(`http://${a.admin}/`, { waitUntil: "load" });
    await bare.waitForSelector("#token-form:not([hidden])");
    await bare.type("#token", "not-the-token");
    await bare.keyboard.press("Enter");
    await bare.waitForFunction(() => /refused/.test(document.querySelector("#token-reason").textContent));
    await bare.type("#token", token);
    await bare.keyboard.press("Enter");
    await bare.waitForSelector("#nodes tbody tr");
    if (await bare.$eval("#token-form", (f) => !f.hidden)) fail("the token form stays after the right token");
    await bare.close();

    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    const problems = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
    page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
    page.setDefaultTimeout(WAIT_MS);

    step("opening the page with #token=...");
    await page.goto(`http://${a.admin}/#token=${token}`, { waitUntil: "load" });

    // The three nodes, ready, each with its listen address; the token gone from the URL.
    step("waiting for the three nodes, ready");
    await page.waitForFunction((names) => {
      const rows = [...document.querySelectorAll("#nodes tbody tr")];
      return names.every((n) => rows.some((r) => r.dataset.node === n && r.querySelector(".state").textContent === "ready"));
    }, {}, all);
    if ((await page.evaluate(() => location.href)).includes(token)) fail("the token stays in the address bar");
    const rows = await page.$$eval("#nodes tbody tr", (rs) => rs.map((r) => r.innerText));
    for (const n of [a, b, c])
      if (!rows.some((r) => r.includes(n.name) && r.includes(n.listen) && r.includes(n.admin)))
        fail(`no row of the nodes table shows ${n.name} at ${n.listen} with admin ${n.admin}: ${JSON.stringify(rows)}`);

    // Balancer w with its three members and a chart.
    const members = '[data-balancer="w"] .members li';
    step("waiting for w and its three members");
    await page.waitForFunction((sel, n) => document.querySelectorAll(sel).length === n, {}, members, 3);
    const seen = (await texts(page, members)).sort();
    if (JSON.stringify(seen) !== JSON.stringify(all)) fail(`w's members are ${seen}, expected ${all}`);
    step("waiting for w's chart and the event subscription");
    await page.waitForSelector('[data-balancer="w"] .chart canvas');
    await page.waitForFunction(() => /Subscribed to/.test(document.querySelector("#events-state").textContent));

    // Drain b: the dialog asks first; Cancel changes nothing, Drain takes b out of w.
    const drainB = `button[data-key="drain/${b.name}"]`;
    step("Drain b, then Cancel");
    await page.click(drainB);
    await page.waitForSelector("#confirm[open]");
    const question = await page.$eval("#confirm-text", (e) => e.textContent);
    if (!question.includes(b.name)) fail(`the drain dialog does not name ${b.name}: ${question}`);
    const before = await page.$eval("#status", (e) => e.textContent);
    await page.click("#confirm-cancel");
    await page.waitForSelector("#confirm:not([open])");
    await page.waitForFunction((t) => document.querySelector("#status").textContent !== t, {}, before);
    if ((await texts(page, members)).length !== 3 || (await page.$eval("#message", (e) => e.textContent)) !== "")
      fail("Cancel in the drain dialog still did something");
    step("Drain b, then confirm");
    await page.click(drainB);
    await page.waitForSelector("#confirm[open]");
    await page.screenshot({ path: path.join(outDir, "admin-console-confirm.png") });
    await page.click("#confirm-ok");
    step("waiting for b to leave w's members");
    await page.waitForFunction((sel, gone) => {
      const names = [...document.querySelectorAll(sel)].map((e) => e.textContent);
      return names.length === 2 && !names.includes(gone);
    }, {}, members, b.name);
    step("waiting for b's state, the answer and a membership.leave event");
    await page.waitForFunction((n) =>
      document.querySelector(`#nodes tr[data-node="${n}"] .state`)?.textContent === "drained", {}, b.name);
    await page.waitForFunction((n) => document.querySelector("#message").textContent.includes(`${n}: drained w`),
      {}, b.name);
    // a saw b leave the group: the event stream shows it.
    await page.waitForFunction((n) => [...document.querySelectorAll("#events tbody tr")]
      .some((r) => r.innerText.includes("membership.leave") && r.innerText.includes(n)), {}, b.name);

    // The text filter hides what does not match.
    step("filtering the events");
    await page.type("#event-filter", "no-such-event-text");
    await page.waitForFunction(() => document.querySelectorAll("#events tbody tr").length === 0);
    await page.$eval("#event-filter", (e) => { e.value = ""; e.dispatchEvent(new Event("input")); });
    await page.waitForFunction(() => document.querySelectorAll("#events tbody tr").length > 0);
    await page.screenshot({ path: path.join(outDir, "admin-console.png"), fullPage: true });

    // Change algorithm: the node answers, and the page shows the answer, whatever it is
    // (unknown_command on a node without balancer_set_algorithm).
    step("Change algorithm of w on a to random");
    await page.click(`button[data-key="algorithm/${a.name}/w"]`);
    await page.waitForSelector("#confirm[open]");
    await page.$eval("#algorithm", (e) => { e.value = "random"; });
    await page.click("#confirm-ok");
    await page.waitForFunction(() => /now uses random|failed: /.test(document.querySelector("#message").textContent));
    const answer = await page.$eval("#message", (e) => e.textContent);
    if (!/now uses random|failed: unknown_command: /.test(answer)) fail(`unexpected answer to the change: ${answer}`);
    console.log(`change algorithm: ${answer}`);
    if (/now uses random/.test(answer))
      await page.waitForFunction((n) => document.querySelector(`[data-balancer="w"] tr[data-node="${n}"] td`)
        ?.textContent === "random", {}, a.name);

    // Undrain b: it is a member again.
    step("Undrain b, waiting for it to be a member again");
    await page.click(`button[data-key="undrain/${b.name}"]`);
    await page.waitForSelector("#confirm[open]");
    await page.click("#confirm-ok");
    await page.waitForFunction((sel, n) => document.querySelectorAll(sel).length === n, {}, members, 3);

    // Stop c: the process exits with status 0 and its row goes.
    step("Stop c, waiting for it to exit");
    await page.click(`button[data-key="stop/${c.name}"]`);
    await page.waitForSelector("#confirm[open]");
    await page.click("#confirm-ok");
    await waitFor(`${c.name} exits`, () => c.exited !== null);
    if (c.exited !== 0) fail(`${c.name} exited with ${c.exited} after Stop, expected 0`);
    await page.waitForFunction((n) => !document.querySelector(`#nodes tr[data-node="${n}"]`), {}, c.name);

    if (problems.length) fail(`the page reported problems:\n${problems.join("\n")}`);
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

async function main() {
  if (!binDir) fail("RPCLB_BIN_DIR is not set (run this through ctest -R browser)");
  if (!fs.existsSync(chromiumPath))
    fail(`no browser at ${chromiumPath}: install Debian's chromium (bash scripts/setup.sh does)`);
  let puppeteer;
  try {
    puppeteer = require("puppeteer-core");
  } catch {
    fail(`puppeteer-core is missing: run npm ci in ${__dirname} (bash scripts/setup.sh does)`);
  }
  fs.mkdirSync(outDir, { recursive: true });
  const started = Date.now();
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the test took over ${TEST_DEADLINE_MS} ms`)), TEST_DEADLINE_MS);
  });
  try {
    await Promise.race([run(puppeteer), deadline]);
    console.log(`admin console browser test passed in ${((Date.now() - started) / 1000).toFixed(1)} s; ` +
      `screenshots in ${outDir}`);
  } finally {
    clearTimeout(timer);
    await stopNodes();
  }
}

for (const signal of ["SIGINT", "SIGTERM"])
  process.on(signal, () => stopNodes().finally(() => process.exit(1)));

main().then(() => process.exit(0), (e) => {
  console.error(`FAIL while ${current}: ${e.message}`);
  for (const n of nodes) console.error(`--- ${n.name} log (${n.log}):\n${fs.readFileSync(n.log, "utf8").slice(-3000)}`);
  process.exit(1);
});
