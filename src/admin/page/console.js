// The rpclb admin console: one page talking the admin protocol
// (doc/reference/admin-protocol.md) over WebSocket /admin of the node that served it.
// Every second it asks that node for the cluster's nodes and, through it, each node for
// its balancers and metrics; it redraws the tables and charts from the answers. Its
// confirmation dialog (confirmDialog) is dialog.js, which the page loads first.
"use strict";

(() => {
  const POLL_MS = 1000;
  const HISTORY = 180;            // chart points per balancer (three minutes)
  const MAX_EVENTS = 500;         // events kept for the table
  const ASK_TIMEOUT_MS = 10000;   // a read-only request
  const ACTION_TIMEOUT_MS = 120000;  // drain waits for calls in flight
  const RECONNECT_MS = 2000;
  const TOKEN_KEY = "rpclb-admin-token";

  const $ = (selector) => document.querySelector(selector);

  class AdminError extends Error {
    constructor(code, message) {
      super(message);
      this.code = code;
    }
    toString() { return `${this.code}: ${this.message}`; }
  }

  // ---- the token: from #token=... (then removed from the address bar) or the form ----------
  function takeToken() {
    const fragment = new URLSearchParams(location.hash.slice(1));
    if (fragment.has("token")) {
      sessionStorage.setItem(TOKEN_KEY, fragment.get("token"));
      history.replaceState(null, "", location.pathname + location.search);
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }
  let token = takeToken();

  // ---- the connection ------------------------------------------------------------------------
  let ws = null;
  let nextId = 1;
  const pending = new Map();  // id -> {resolve, reject, timer}
  let pollTimer = null;

  function setStatus(text) { $("#status").textContent = text; }

  function say(text, isError) {
    const m = $("#message");
    m.textContent = text;
    m.className = isError ? "error" : "ok";
    m.setAttribute("role", isError ? "alert" : "status");
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setStatus(`Connecting to ${location.host}…`);
    const socket = new WebSocket(scheme + location.host + "/admin");
    ws = socket;
    socket.onopen = () => authenticate();
    socket.onmessage = (m) => onMessage(m.data);
    socket.onclose = () => {
      if (ws !== socket) return;
      ws = null;
      stopPolling();
      for (const p of pending.values()) {
        clearTimeout(p.timer);
        p.reject(new AdminError("disconnected", "the connection to the node closed"));
      }
      pending.clear();
      events.subscription = null;
      showSubscription();
      setStatus(`Disconnected from ${location.host}; trying again…`);
      setTimeout(connect, RECONNECT_MS);
    };
  }

  // Sends one request; resolves with its result, rejects with an AdminError.
  function ask(cmd, fields = {}, timeoutMs = ASK_TIMEOUT_MS) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN)
        return reject(new AdminError("disconnected", "not connected to the node"));
      const id = nextId++;
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new AdminError("timeout", `no answer to ${cmd} within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      pending.set(id, { resolve, reject, timer });
      ws.send(JSON.stringify({ id, cmd, ...fields }));
    });
  }

  function onMessage(text) {
    let m;
    try { m = JSON.parse(text); } catch { return; }
    if ("sub" in m) return onEvent(m);
    const p = pending.get(m.id);
    if (!p) return;
    pending.delete(m.id);
    clearTimeout(p.timer);
    if (m.error) p.reject(new AdminError(m.error.code, m.error.message));
    else p.resolve(m.result);
  }

  async function authenticate() {
    try {
      await ask("auth", token ? { token } : {});
    } catch (e) {
      if (e.code !== "unauthorized") return setStatus(`Cannot authenticate: ${e}`);
      $("#token-reason").textContent = token ? `The node refused the token (${e.message}).` :
        "This node needs its admin token.";
      $("#token-form").hidden = false;
      $("#token").focus();
      return setStatus("Waiting for the admin token.");
    }
    $("#token-form").hidden = true;
    startPolling();
    subscribe();
  }

  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("#token").value;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#token").value = "";
    if (ws && ws.readyState === WebSocket.OPEN) authenticate();
  });

  // ---- polling: nodes, then every node's balancers -------------------------------------------
  let polling = false;
  let self = null;  // the node this page talks to

  function startPolling() {
    stopPolling();
    poll();
    pollTimer = setInterval(poll, POLL_MS);
  }

  function stopPolling() {
    clearInterval(pollTimer);
    pollTimer = null;
  }

  async function poll() {
    if (polling) return;
    polling = true;
    try {
      const { nodes } = await ask("nodes");
      self = nodes.find((n) => n.self) || null;
      const answers = await Promise.all(nodes.filter((n) => !n.error).map((n) => {
        const where = n.self ? {} : { node: n.name };
        return Promise.all([ask("balancers", where), ask("metrics", where)]).then(
          ([b, m]) => ({ ...b, histograms: parseHistograms(m.text) }),
          (e) => ({ node: n.name, error: e }));
      }));
      renderNodes(nodes);
      renderBalancers(answers);
      showSubscription();
      setStatus(`Connected to ${self ? self.name : location.host} · updated ${new Date().toLocaleTimeString()}`);
    } catch (e) {
      setStatus(`Update failed: ${e}`);
    } finally {
      polling = false;
    }
  }

  // ---- small DOM helpers ----------------------------------------------------------------------
  function el(tag, attributes = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attributes)) {
      if (k === "class") { if (v) e.className = v; }
      else if (v === true) e.setAttribute(k, "");
      else if (v !== false && v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  // Makes `old` look like `fresh` by changing only what differs, so the elements under the
  // pointer and the keyboard focus survive the once-a-second redraw (a replaced button
  // would swallow a click that began before the redraw).
  function morph(old, fresh) {
    if (old.nodeType !== fresh.nodeType || old.nodeName !== fresh.nodeName) {
      old.replaceWith(fresh);
      return;
    }
    if (old.nodeType === Node.TEXT_NODE) {
      if (old.data !== fresh.data) old.data = fresh.data;
      return;
    }
    for (const { name } of [...old.attributes]) if (!fresh.hasAttribute(name)) old.removeAttribute(name);
    for (const { name, value } of fresh.attributes) if (old.getAttribute(name) !== value) old.setAttribute(name, value);
    const had = [...old.childNodes];
    [...fresh.childNodes].forEach((child, i) => (i < had.length ? morph(had[i], child) : old.append(child)));
    had.slice(fresh.childNodes.length).forEach((child) => child.remove());
  }

  function replaceRows(tbody, rows) { morph(tbody, el("tbody", {}, ...rows)); }

  const fmt = (x, digits = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

  // ---- nodes ----------------------------------------------------------------------------------
  const busy = new Set();  // "action/node" keys running now

  function renderNodes(nodes) {
    replaceRows($("#nodes tbody"), nodes.map((n) => {
      const admin = !n.error;
      const state = !admin ? n.error : n.drained ? "drained" : n.ready ? "ready" : "not ready";
      const client = !admin ? "unknown" : n.listen ? "no" : "yes";
      const actions = el("td", { class: "actions" });
      if (admin) {
        actions.append(
          actionButton("Drain", "drain", n.name, n.drained),
          actionButton("Undrain", "undrain", n.name, !n.drained),
          actionButton("Stop", "stop", n.name, false, "danger"));
      }
      return el("tr", { "data-node": n.name },
        el("th", { scope: "row", class: "mono" }, n.name + (n.self ? " (this node)" : "")),
        el("td", { class: "mono" }, n.listen || "–"),
        el("td", { class: "mono" }, n.admin || "–"),
        el("td", { class: "mono" }, n.incarnation || "–"),
        el("td", {}, n.connected ? "yes" : "no"),
        el("td", {}, client),
        el("td", { class: admin ? "state" : "state error" }, state),
        el("td", { class: "num" }, n.self ? "–" : fmt(n.keepalive_rtt_ms, 2)),
        actions);
    }));
  }

  function actionButton(label, action, node, disabled, cls) {
    const key = `${action}/${node}`;
    return el("button", {
      type: "button", class: cls, "data-key": key, "data-action": action, "data-node": node,
      "aria-label": `${label} ${node}`, disabled: disabled || busy.has(key),
    }, label);
  }

  // One listener for every action button: it reads what to do from the button's data.
  document.addEventListener("click", (e) => {
    const button = e.target.closest("button[data-action]");
    if (!button || button.disabled) return;
    const { action, node, balancer } = button.dataset;
    if (action === "change-algorithm") changeAlgorithm(node, balancer);
    else nodeAction(action, node);
  });

  const nodeActions = {
    drain: {
      title: "Drain node", verb: "Drain",
      text: (n) => `Drain ${n}? Its balancers leave their groups, so no new calls are routed to it; ` +
        "calls in flight finish first. The process keeps running.",
      done: (n, r) => `${n}: drained ${r.drained.length ? r.drained.join(", ") : "no balancer"}.`,
    },
    undrain: {
      title: "Undrain node", verb: "Undrain",
      text: (n) => `Undrain ${n}? It starts again the balancers the drain stopped.`,
      done: (n, r) => `${n}: started ${r.started.length ? r.started.join(", ") : "no balancer"}` +
        (r.failed.length ? `; failed: ${r.failed.map((f) => `${f.name} (${f.message})`).join(", ")}` : "") + ".",
    },
    stop: {
      title: "Stop node", verb: "Stop",
      text: (n) => `Stop ${n}? It drains, finishes the calls it serves and exits. ` +
        "Only a restart brings it back.",
      done: (n) => `${n} is stopping.`,
    },
  };

  async function nodeAction(action, node) {
    const a = nodeActions[action];
    if (!(await confirmDialog({ title: a.title, text: a.text(node), ok: a.verb }))) return;
    await run(`${action}/${node}`, `${a.verb} ${node}`, () => ask(action, target(node), ACTION_TIMEOUT_MS),
      (r) => a.done(node, r));
  }

  // The `node` field: none for the node this page talks to.
  const target = (node) => (self && node === self.name ? {} : { node });

  async function run(key, what, send, describe) {
    busy.add(key);
    document.querySelectorAll(`[data-key="${CSS.escape(key)}"]`).forEach((b) => { b.disabled = true; });
    say(`${what}…`, false);
    try {
      say(describe(await send()), false);
    } catch (e) {
      say(`${what} failed: ${e}`, true);
    } finally {
      busy.delete(key);
      poll();
    }
  }

  // ---- latency from the duration histograms --------------------------------------------------
  // The `balancers` answer gives quantiles since the node started; the chart wants the calls
  // of the last interval, so it takes the difference of two /metrics histograms.
  const BUCKET = /^rpclb_balancer_call_duration_seconds_bucket\{load_balancer="((?:[^"\\]|\\.)*)",le="([^"]+)"\} (\d+)$/gm;

  // Prometheus text -> Map(balancer -> {bounds: [s...], counts: [cumulative...]}), +Inf last.
  function parseHistograms(text) {
    const histograms = new Map();
    for (const [, escaped, le, count] of text.matchAll(BUCKET)) {
      const name = escaped.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      if (!histograms.has(name)) histograms.set(name, { bounds: [], counts: [] });
      const h = histograms.get(name);
      h.bounds.push(le === "+Inf" ? Infinity : Number(le));
      h.counts.push(Number(count));
    }
    return histograms;
  }

  // The q-quantile, in ms, of cumulative bucket counts, interpolated inside the bucket as
  // Prometheus' histogram_quantile does; null when there are no calls.
  function quantileMs(q, bounds, counts) {
    const total = counts[counts.length - 1];
    if (!total) return null;
    const rank = q * total;
    const i = counts.findIndex((c) => c >= rank);
    if (bounds[i] === Infinity) return bounds[i - 1] * 1000;
    const lower = i === 0 ? 0 : bounds[i - 1];
    const below = i === 0 ? 0 : counts[i - 1];
    return (lower + (bounds[i] - lower) * ((rank - below) / (counts[i] - below))) * 1000;
  }

  // ---- balancers ------------------------------------------------------------------------------
  const views = new Map();  // balancer name -> {section, members, tbody, chart, data}
  const lastCalls = new Map();  // "node/balancer" -> {calls, t}
  const latest = new Map();     // "node/balancer" -> the balancer as that node last described it
  const lastHistogram = new Map();  // "node/balancer" -> its duration histogram at the last poll

  function renderBalancers(answers) {
    const now = Date.now() / 1000;
    const byName = new Map();  // name -> [{node, b}], drained ones with b = null
    for (const a of answers) {
      if (a.error) continue;
      for (const b of a.balancers) {
        if (!byName.has(b.name)) byName.set(b.name, []);
        byName.get(b.name).push({ node: a.node, b, histogram: a.histograms.get(b.name) });
      }
      for (const name of a.drained) {
        if (!byName.has(name)) byName.set(name, []);
        byName.get(name).push({ node: a.node, b: null });
      }
    }
    for (const [name, view] of views) {
      if (byName.has(name)) continue;
      view.chart.destroy();
      view.section.remove();
      views.delete(name);
    }
    $("#no-balancers").hidden = byName.size > 0;
    for (const name of [...byName.keys()].sort()) {
      const hosts = byName.get(name).sort((x, y) => x.node.localeCompare(y.node));
      const view = views.get(name) || createView(name);
      updateView(view, name, hosts, now);
    }
  }

  function createView(name) {
    const id = `balancer-${views.size}-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const chartBox = el("div", { class: "chart", role: "img", "aria-label": `Calls per second and p99 latency of ${name}` });
    const tbody = el("tbody");
    const section = el("section", { class: "balancer", "data-balancer": name, "aria-labelledby": id },
      el("h3", { id }, `Balancer ${name}`),
      el("p", { class: "members-of" }),
      el("ul", { class: "members", "aria-label": `Members of ${name}` }),
      el("table", {},
        el("caption", {}, `${name} on each node that hosts it. Calls, latency and in-flight count cover the calls that node routed; p50 and p99 since the node started.`),
        el("thead", {}, el("tr", {}, ...["Node", "Algorithm", "Options", "Joined", "In flight", "Serving", "Calls",
          "Errors", "Hedges (won) / retries", "Calls/s", "p50 (ms)", "p99 (ms)", "Actions"].map((h) => el("th", { scope: "col" }, h)))),
        tbody),
      chartBox);
    $("#balancers").append(section);
    const data = [[], [], []];
    const chart = new uPlot({
      width: chartWidth(),
      height: 220,
      scales: { x: { time: true }, calls: { auto: true, range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] },
        ms: { auto: true, range: (u, lo, hi) => [0, Math.max(1, (hi ?? 1) * 1.1)] } },
      series: [
        {},
        { label: "calls/s (all nodes)", scale: "calls", stroke: "#0b57d0", width: 2, value: (u, v) => fmt(v) },
        { label: "p99 ms (all nodes)", scale: "ms", stroke: "#b3261e", width: 2, value: (u, v) => fmt(v, 2) },
      ],
      axes: [
        {},
        { scale: "calls", label: "calls/s" },
        { scale: "ms", side: 1, label: "p99 ms", grid: { show: false } },
      ],
    }, data, chartBox);
    const view = { section, tbody, chart, data };
    views.set(name, view);
    return view;
  }

  function chartWidth() { return Math.max(320, Math.min(960, $("#balancers").clientWidth || 720)); }
  window.addEventListener("resize", () => {
    for (const v of views.values()) v.chart.setSize({ width: chartWidth(), height: 220 });
  });

  function updateView(view, name, hosts, now) {
    // Members as the page's own node sees the group, else as the first host does.
    const seer = hosts.find((h) => h.b && self && h.node === self.name) || hosts.find((h) => h.b);
    const members = seer ? seer.b.members : [];
    view.section.querySelector(".members-of").textContent = seer ?
      `${members.length} member${members.length === 1 ? "" : "s"}, as ${seer.node} sees the group:` :
      "Stopped on every node (drained).";
    // Calls in flight to each member (the seer's own calls through the balancer), shown
    // by the stylesheet from data-in-flight so that the item's text stays the node's name.
    const inFlight = (seer && seer.b.in_flight_by_member) || {};
    view.section.querySelector(".members").replaceChildren(
      ...members.map((m) => el("li", { "data-in-flight": String(inFlight[m] || 0) }, m)));

    let rate = 0;
    let interval = null;  // the cumulative bucket counts of this interval's calls, all nodes
    let bounds = null;
    const rows = hosts.map(({ node, b, histogram }) => {
      if (!b) {
        return el("tr", { "data-node": node },
          el("th", { scope: "row", class: "mono" }, node),
          el("td", { colspan: 12 }, "drained: stopped until undrain"));
      }
      const key = `${node}/${name}`;
      latest.set(key, b);
      const last = lastCalls.get(key);
      let perSecond = null;
      if (last && now > last.t) perSecond = Math.max(0, b.calls - last.calls) / (now - last.t);
      lastCalls.set(key, { calls: b.calls, t: now });
      rate += perSecond || 0;
      // No histogram yet means no call yet: polled before without one counts as all zeros.
      const polled = lastHistogram.has(key);
      const before = lastHistogram.get(key) || { counts: histogram ? histogram.counts.map(() => 0) : [] };
      lastHistogram.set(key, histogram || null);
      if (histogram && polled && before.counts.length === histogram.counts.length) {
        const delta = histogram.counts.map((c, i) => c - before.counts[i]);
        if (delta.every((d) => d >= 0)) {  // a restarted node starts from zero: skip it once
          interval = interval ? interval.map((c, i) => c + delta[i]) : delta;
          bounds = histogram.bounds;
        }
      }
      const errors = Object.entries(b.calls_by_status || {}).filter(([s]) => s !== "ok").reduce((n, [, c]) => n + c, 0);
      const changeKey = `algorithm/${node}/${name}`;
      const h = b.hedging || {};
      return el("tr", { "data-node": node },
        el("th", { scope: "row", class: "mono" }, node),
        el("td", { class: "mono" }, b.algorithm),
        el("td", { class: "mono" }, JSON.stringify(b.algorithm_opts || {})),
        el("td", {}, b.joined ? "yes" : "no"),
        el("td", { class: "num" }, b.in_flight),
        el("td", { class: "num" }, b.serving),
        el("td", { class: "num" }, b.calls),
        el("td", { class: "num" }, errors),
        el("td", {
          class: "num", "data-hedging": "",
          title: `${h.budget_refusals || 0} refused by the budget, ${h.late_replies || 0} late replies dropped, ` +
            `${h.hedged_calls || 0} calls hedged`,
        }, `${h.hedges || 0} (${h.hedge_wins || 0}) / ${h.retries || 0}`),
        el("td", { class: "num" }, fmt(perSecond)),
        el("td", { class: "num" }, fmt(b.p50_ms, 2)),
        el("td", { class: "num" }, fmt(b.p99_ms, 2)),
        el("td", {}, el("button", {
          type: "button", "data-key": changeKey, "data-action": "change-algorithm", "data-node": node,
          "data-balancer": name, "aria-label": `Change the algorithm of ${name} on ${node}`,
          disabled: busy.has(changeKey),
        }, "Change algorithm")));
    });
    replaceRows(view.tbody, rows);

    const [xs, calls, lat] = view.data;
    xs.push(now);
    calls.push(rate);
    lat.push(interval ? quantileMs(0.99, bounds, interval) : null);
    if (xs.length > HISTORY) view.data.forEach((s) => s.shift());
    view.chart.setData(view.data);
  }

  async function changeAlgorithm(node, name) {
    const b = latest.get(`${node}/${name}`);
    if (!b) return;
    const choice = await confirmDialog({
      title: `Change the algorithm of ${name}`,
      text: `The balancer ${name} on ${node} keeps serving and picks with the new algorithm from now on.`,
      ok: "Change",
      algorithm: { name: b.algorithm, options: b.algorithm_opts || {} },
    });
    if (!choice) return;
    // The fields of balancer_start: name, algorithm, algorithm_opts.
    const fields = { ...target(node), name, algorithm: choice.algorithm, algorithm_opts: choice.options };
    await run(`algorithm/${node}/${name}`, `Change the algorithm of ${name} on ${node} to ${choice.algorithm}`,
      () => ask("balancer_set_algorithm", fields, ACTION_TIMEOUT_MS),
      () => `${name} on ${node} now uses ${choice.algorithm}.`);
  }

  // ---- telemetry events -----------------------------------------------------------------------
  const events = { subscription: null, list: [], dropped: 0, wanted: true, renderQueued: false };

  function showSubscription() {
    $("#unsubscribe").disabled = events.subscription === null;
    $("#subscribe").textContent = events.subscription === null ? "Subscribe" : "Resubscribe";
    let text = events.subscription === null ? "Not subscribed." :
      `Subscribed to ${$("#event-patterns").value.trim() || "every event"} on ${self ? self.name : location.host}.`;
    if (events.dropped) text += ` ${events.dropped} events dropped (the page read too slowly).`;
    $("#events-state").textContent = text;
  }

  async function subscribe() {
    if (!events.wanted) return;
    const patterns = $("#event-patterns").value.split(/[\s,]+/).filter(Boolean);
    try {
      if (events.subscription !== null) await unsubscribe(true);
      const filter = patterns.length && !patterns.includes("*") ? { events: patterns } : {};
      const r = await ask("subscribe", { filter });
      events.subscription = r.subscription;
      events.dropped = 0;
    } catch (e) {
      say(`Subscribe failed: ${e}`, true);
    }
    showSubscription();
  }

  async function unsubscribe(keepWanted) {
    const id = events.subscription;
    events.subscription = null;
    if (!keepWanted) events.wanted = false;
    if (id !== null) {
      try { await ask("unsubscribe", { subscription: id }); } catch (e) { say(`Unsubscribe failed: ${e}`, true); }
    }
    showSubscription();
  }

  $("#events-form").addEventListener("submit", (e) => {
    e.preventDefault();
    events.wanted = true;
    subscribe();
  });
  $("#unsubscribe").addEventListener("click", () => unsubscribe(false));
  $("#event-filter").addEventListener("input", () => queueEventRender());

  function onEvent(m) {
    if (m.sub !== events.subscription) return;
    if ("dropped" in m) {
      events.dropped = m.dropped;
      showSubscription();
      return;
    }
    const { event: name, ...fields } = m.event;
    const text = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === "number" ? +v.toFixed(3) : v}`).join(" ");
    events.list.push({ time: new Date(), name, text, search: `${name} ${text}`.toLowerCase() });
    if (events.list.length > MAX_EVENTS) events.list.shift();
    queueEventRender();
  }

  // Events may come in bursts: draw at most once a frame.
  function queueEventRender() {
    if (events.renderQueued) return;
    events.renderQueued = true;
    requestAnimationFrame(() => {
      events.renderQueued = false;
      const needle = $("#event-filter").value.trim().toLowerCase();
      const shown = events.list.filter((e) => !needle || e.search.includes(needle)).reverse();
      $("#events tbody").replaceChildren(...shown.map((e) => el("tr", {},
        el("td", {}, e.time.toLocaleTimeString(undefined, { hour12: false }) + "." +
          String(e.time.getMilliseconds()).padStart(3, "0")),
        el("td", {}, e.name),
        el("td", {}, e.text))));
    });
  }

  connect();
})();
