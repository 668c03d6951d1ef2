// hopper's dashboard: plain JavaScript, no build step. Talks only to /api (docs/web.md).
// Live data comes from Server-Sent Events the server pushes on file events:
// /api/jobs (every job.json change), /api/jobs/ID/log and /events (the job's files).
"use strict";
(function () {
  const STATES = ["queued", "running", "succeeded", "failed", "aborted"];
  const TERMINAL = new Set(["succeeded", "failed", "aborted"]);
  const $ = (sel) => document.querySelector(sel);
  let listStream = null, paused = false, current = null;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
    return node;
  }
  function problem(text) { const p = $("#problem"); p.textContent = text || ""; p.hidden = !text; }
  async function api(path, options) {
    const opts = Object.assign({ headers: {} }, options || {});
    if (opts.method === "POST") {
      opts.headers["X-Hopper-CSRF"] = "1";
      opts.headers["Content-Type"] = "application/json";
    }
    const r = await fetch(path, opts);
    if (r.status === 401) {
      problem("Not signed in: open the URL `hopper web` printed (it ends in ?token=…).");
      throw new Error("401");
    }
    const type = r.headers.get("content-type") || "";
    const body = type.includes("json") ? await r.json() : await r.text();
    if (!r.ok) throw new Error((body && body.error) || r.status + " " + r.statusText);
    return body;
  }
  const when = (iso) => {
    if (!iso) return "-";
    const d = new Date(iso), p = (n) => String(n).padStart(2, "0");
    return p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  };
  function took(job) {
    let s = job.duration_seconds;
    if (s == null && job.started_at && !TERMINAL.has(job.state)) s = (Date.now() - Date.parse(job.started_at)) / 1000;
    if (s == null) return "-";
    s = Math.max(0, Math.round(s));
    return s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m" + (s % 60) + "s" : Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  }
  const cost = (job) => job.usage && job.usage.cost_usd != null ? "$" + job.usage.cost_usd.toFixed(4) : "-";
  const groupOf = (job) => {
    if (job.group) return job.group;
    const parts = (job.inbox_path || "").split("/");
    return parts[0] === "inbox" && parts.length > 2 ? parts[1] : "";
  };
  const badge = (state) => el("span", { class: "state " + state }, state);

  // -- the job list: one page at a time from the server (GET api/page), newest first ------
  // The server filters, sorts and counts over every job (store/index_page.py); the page
  // holds only the rows it shows. Live job events update a shown row at once and ask for
  // the page again (at most every PAGE_AGAIN ms), so counts and rows stay the server's.
  const PAGE = 50, PAGE_AGAIN = 500;
  let rows = [], why = {}, next = null, loaded = false, pageTimer = null, pageBusy = false, pageWanted = false;
  function query(extra) {
    const f = Object.fromEntries(new FormData($("#filters")).entries());
    const q = new URLSearchParams();
    for (const k of ["state", "agent", "group", "reason"]) if (f[k]) q.set(k, f[k].trim());
    if (f.since) q.set("since", f.since + "s");
    const text = (f.q || "").trim();
    if (text) q.set(/[*?[]/.test(text) ? "name" : "q", text);
    for (const [k, v] of Object.entries(extra || {})) q.set(k, v);
    return q.toString();
  }
  async function loadPage(more) {
    if (pageBusy) { pageWanted = more ? "more" : (pageWanted || true); return; }
    pageBusy = true;
    try {
      const size = more ? PAGE : Math.min(500, Math.max(PAGE, rows.length));
      const extra = more && next ? { size, before: next } : { size };
      const body = await api("api/page?" + query(extra));
      rows = more ? rows.concat(body.jobs) : body.jobs;
      why = more ? Object.assign(why, body.why || {}) : (body.why || {});
      next = body.next; loaded = true;
      renderCounts(body.counts, body.total);
      renderList();
    } catch (e) { problem(String(e.message || e)); }
    finally {
      pageBusy = false;
      const again = pageWanted;
      pageWanted = false;
      if (again === "more") loadPage(true); else if (again) pageSoon();
    }
  }
  function pageSoon() {
    if (pageTimer) return;
    pageTimer = setTimeout(() => { pageTimer = null; loadPage(false); }, PAGE_AGAIN);
  }
  function elapsed(job) { return job.state === "running" ? "running " + took(job) : ""; }
  function rowWhy(j) {
    if (j.state === "failed" || j.state === "aborted") {
      const head = [j.reason, j.exit_code != null && j.exit_code !== 0 ? "exit " + j.exit_code : null].filter(Boolean).join(" · ");
      const line = why[j.id] || j.detail || "";
      return [head, line].filter(Boolean).join(": ");
    }
    if (j.state === "queued") return why[j.id] || "queued";
    if (j.state === "running") return [elapsed(j), j.agent_state && "agent " + j.agent_state, why[j.id]].filter(Boolean).join(" · ");
    return j.reason && j.reason !== "completed" ? j.reason : "";
  }
  function renderList() {
    const body = $("#jobs tbody");
    body.replaceChildren(...rows.map((j) => el("tr", { "data-id": j.id, "data-state": j.state, onclick: () => { location.hash = "#/job/" + encodeURIComponent(j.id); } },
      el("td", { class: "c-name" }, j.name), el("td", { class: "c-state" }, badge(j.state)),
      el("td", { class: "c-why" }, rowWhy(j)),
      el("td", { class: "c-agent" }, j.agent), el("td", { class: "c-agent_state" }, j.agent_state || "-"),
      el("td", { class: "c-group" }, groupOf(j) || "-"), el("td", { class: "c-started" }, when(j.started_at)),
      el("td", { class: "c-duration" }, took(j)), el("td", { class: "c-cost" }, cost(j)))));
    $("#loading").hidden = loaded;
    $("#empty").hidden = !loaded || rows.length > 0;
    $("#more").hidden = !next;
    $("#shown").textContent = loaded ? "showing " + rows.length + " of " + $("#shown").dataset.total : "";
  }
  function renderCounts(counts, total) {
    $("#shown").dataset.total = total == null ? "" : String(total);
    $("#counts").replaceChildren(...STATES.map((s) => el("span", {
      class: "count", "data-state": s, title: "show " + s + " jobs",
      onclick: () => { $("#filters").state.value = s; location.hash = "#/"; loadPage(false); },
    }, badge(s), el("b", {}, counts ? String(counts[s] || 0) : "…"))));
  }
  let overviewTimer = null;
  function refreshOverview() {
    clearTimeout(overviewTimer);
    overviewTimer = setTimeout(async () => {
      try { const o = await api("api/overview"); setPaused(o.paused); renderWatcher(o); } catch (e) { /* shown */ }
    }, 300);
  }
  function renderWatcher(o) {
    const b = $("#watcher");
    b.hidden = !o.banner;
    b.textContent = o.banner || "";
    const w = $("#watcher-state");
    w.textContent = "watcher: " + o.watcher;
    w.className = "watcher " + o.watcher;
    w.setAttribute("data-watcher", o.watcher);
    w.title = o.watcher_detail || "";
    const list = $("#reasons");
    if (!list.children.length) list.append(...(o.reasons || []).map((r) => el("option", { value: r })));
  }
  function setPaused(p) {
    paused = p;
    const b = $("#pause");
    b.textContent = p ? "Resume" : "Pause";
    b.classList.toggle("paused", p);
    b.title = p ? "paused: queued jobs wait (running ones finish). Click to resume." : "Pause: queued jobs wait; running jobs finish";
  }
  function connectList() {
    if (listStream) listStream.close();
    listStream = new EventSource("api/jobs");
    listStream.addEventListener("hello", () => {
      $("#live").className = "on";
      loadPage(false); refreshOverview();
      if (current) showJob(current, false);
    });
    listStream.addEventListener("hello", (e) => setPaused(JSON.parse(e.data).paused));
    listStream.addEventListener("job", (e) => {
      const j = JSON.parse(e.data);
      const i = rows.findIndex((r) => r.id === j.id);
      if (i >= 0) { rows[i] = j; renderList(); }
      pageSoon(); refreshOverview();
      if (current === j.id) showRecord(j);
    });
    listStream.addEventListener("removed", () => { pageSoon(); refreshOverview(); });
    listStream.addEventListener("pause", (e) => { setPaused(JSON.parse(e.data).paused); pageSoon(); });
    // dropped for falling behind: shown as not live until the browser reconnects (hello)
    listStream.addEventListener("reload", () => { $("#live").className = "off"; });
    listStream.onerror = () => { $("#live").className = "off"; };
  }

  // -- one job -------------------------------------------------------------------------
  let term = null, fit = null, finder = null, logStream = null, eventStream = null;
  const FIND = { decorations: { matchBackground: "#665c00", activeMatchBackground: "#d4a000",
    matchOverviewRuler: "#d4a000", activeMatchColorOverviewRuler: "#ffcc00" } };
  function findInLog(back) {
    const text = $("#log-search").value;
    if (!finder) return;
    if (!text) { finder.clearDecorations(); $("#log-found").textContent = ""; return; }
    const found = back ? finder.findPrevious(text, FIND) : finder.findNext(text, FIND);
    if (!found) $("#log-found").textContent = "not found";
  }
  function terminal() {
    if (!term) {
      term = new window.Terminal({ convertEol: true, disableStdin: true, scrollback: 20000, fontSize: 13,
        allowProposedApi: true,  // the search addon highlights matches with decorations
        theme: { background: "#111111" } });
      fit = new window.FitAddon.FitAddon();
      term.loadAddon(fit);
      finder = new window.SearchAddon.SearchAddon();
      term.loadAddon(finder);
      finder.onDidChangeResults((r) => {
        $("#log-found").textContent = !$("#log-search").value ? "" :
          r.resultCount === 0 ? "not found" : (r.resultIndex + 1) + " of " + r.resultCount;
      });
      term.open($("#terminal"));
      window.addEventListener("resize", () => fit.fit());
    }
    requestAnimationFrame(() => fit.fit());
    return term;
  }
  function closeJobStreams() {
    if (logStream) logStream.close();
    if (eventStream) eventStream.close();
    if (castStream) castStream.close();
    logStream = eventStream = castStream = null;
  }
  // -- an interactive job's terminal: terminal.cast (asciicast v2) replayed, then followed --
  // Read-only: the records' text is written as it came (no timing replay), a resize
  // record resizes; the stream's backlog is the file's end with its header first.
  let castTerm = null, castStream = null;
  async function showCast(id, base) {
    $("#cast-view").hidden = true;
    let r;
    try { r = await fetch(base + "/cast", { headers: { Range: "bytes=0-0" } }); } catch (e) { return; }
    if (!r.ok || current !== id) return;  // 404: not an interactive job
    $("#cast-view").hidden = false;
    if (!castTerm) {
      castTerm = new window.Terminal({ disableStdin: true, scrollback: 5000, fontSize: 13, cols: 80, rows: 24,
        theme: { background: "#111111" } });
      castTerm.open($("#cast"));
    }
    const t = castTerm;
    t.reset();
    const size = (cols, rows) => { if (cols > 0 && rows > 0) t.resize(Math.min(cols, 500), Math.min(rows, 200)); };
    castStream = new EventSource(base + "/cast");
    castStream.addEventListener("start", (e) => {
      t.reset();
      $("#cast-note").textContent = JSON.parse(e.data).cut ? "(its start is not shown: download it from " + base + "/cast)" : "";
    });
    castStream.addEventListener("cast", (e) => {
      const rec = JSON.parse(e.data);
      if (!Array.isArray(rec)) { size(rec.width, rec.height); return; }
      if (rec[1] === "o") t.write(rec[2]);
      else if (rec[1] === "r") { const m = /^(\d+)x(\d+)$/.exec(rec[2]); if (m) size(+m[1], +m[2]); }
    });
    castStream.addEventListener("reset", () => t.reset());
    castStream.addEventListener("end", () => castStream && castStream.close());
  }
  function showRecord(j) {
    $("#job-title").textContent = j.name;
    const st = $("#job-state");
    st.className = "state " + j.state; st.textContent = j.state;
    st.setAttribute("data-state", j.state);
    $("#job-agent-state").textContent = j.agent_state ? "agent: " + j.agent_state : "";
    $("#job-detail").textContent = [j.id, j.agent, j.reason && "reason: " + j.reason, j.detail].filter(Boolean).join(" · ");
    $("#jobjson").textContent = JSON.stringify(j, null, 2);
    $("#job-abort").disabled = TERMINAL.has(j.state);
    $("#job-retry").disabled = !TERMINAL.has(j.state);
    if (TERMINAL.has(j.state)) loadResult(j.id);
  }
  async function loadResult(id) {
    try {
      const text = await api("api/jobs/" + encodeURIComponent(id) + "/result");
      if (current !== id) return;
      const box = $("#result");
      box.classList.remove("muted");
      box.innerHTML = window.renderMarkdown(text);  // escaped first: see markdown.js
    } catch (e) { /* no result.md: keep the placeholder */ }
  }
  async function showJob(id, fresh) {
    if (fresh !== false) {
      closeJobStreams();
      current = id;
      $("#events").replaceChildren();
      $("#job-note").hidden = true;
      $("#log-search").value = ""; $("#log-found").textContent = "";
      $("#log-download").href = "api/jobs/" + encodeURIComponent(id) + "/log?download=1";
      const box = $("#result"); box.textContent = "No result yet."; box.classList.add("muted");
      const t = terminal(); t.reset();
      const base = "api/jobs/" + encodeURIComponent(id);
      logStream = new EventSource(base + "/log");
      logStream.addEventListener("start", (e) => { t.reset(); if (JSON.parse(e.data).cut) t.write("\x1b[2m[earlier output not shown: GET /" + base + "/log]\x1b[0m\n"); });
      logStream.addEventListener("log", (e) => t.write(JSON.parse(e.data)));
      logStream.addEventListener("reset", () => t.write("\n\x1b[2m--- job.log started over (a new attempt) ---\x1b[0m\n"));
      logStream.addEventListener("problem", (e) => t.write("\n\x1b[31m" + JSON.parse(e.data) + "\x1b[0m\n"));
      logStream.addEventListener("end", (e) => { logStream.close(); t.write("\n\x1b[2m--- " + (JSON.parse(e.data).state || "ended") + " ---\x1b[0m\n"); });
      // dropped for falling behind: the stream ends and the browser opens it again after the
      // server's retry delay (2 s, so a flood cannot make it reconnect in a loop); "start"
      // then shows the end of the log afresh
      logStream.addEventListener("reload", () => t.write("\n\x1b[33m--- this page fell behind the log; catching up from its end ---\x1b[0m\n"));
      showCast(id, base);
      eventStream = new EventSource(base + "/events");
      eventStream.addEventListener("start", () => $("#events").replaceChildren());
      eventStream.addEventListener("event", (e) => {
        const ev = JSON.parse(e.data);
        const rest = Object.entries(ev).filter(([k]) => k !== "ts" && k !== "event").map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join(" ");
        $("#events").append(el("li", {}, el("time", {}, when(ev.ts)), el("b", {}, ev.event), " ", rest));
      });
      eventStream.addEventListener("end", () => eventStream.close());
      eventStream.addEventListener("reload", () => $("#events").append(el("li", {}, "fell behind; catching up…")));
    }
    try { showRecord(await api("api/jobs/" + encodeURIComponent(id))); }
    catch (e) { if (current === id) problem(String(e.message || e)); }
  }

  // -- actions ---------------------------------------------------------------------------
  $("#job-abort").addEventListener("click", async () => {
    if (!current || !window.confirm("Abort job " + current + "? Its whole process tree is ended.")) return;
    try { await api("api/jobs/" + encodeURIComponent(current) + "/abort", { method: "POST" }); problem(""); }
    catch (e) { problem(String(e.message || e)); }
  });
  $("#job-retry").addEventListener("click", async () => {
    const note = $("#job-note");
    try {
      const r = await api("api/jobs/" + encodeURIComponent(current) + "/retry", { method: "POST", body: "{}" });
      problem("");
      note.className = "note";
      note.replaceChildren("Retried: its prompt is back in the inbox as ", el("code", {}, r.path),
        "; the new job appears in the list when a watcher claims it. ", el("a", { href: "#/" }, "Back to the list"));
    } catch (e) { note.className = "problem"; note.textContent = "Not retried: " + String(e.message || e); }
    note.hidden = false;
    note.scrollIntoView({ block: "nearest" });
  });
  $("#log-tools").addEventListener("submit", (ev) => { ev.preventDefault(); findInLog(false); });
  $("#log-prev").addEventListener("click", () => findInLog(true));
  $("#log-search").addEventListener("input", () => findInLog(false));
  $("#pause").addEventListener("click", async () => {
    try { const r = await api(paused ? "api/resume" : "api/pause", { method: "POST", body: "{}" }); setPaused(r.paused); }
    catch (e) { problem(String(e.message || e)); }
  });
  $("#submit").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const data = Object.fromEntries(new FormData(ev.target).entries());
    const out = $("#submit-result");
    try {
      const r = await api("api/submit", { method: "POST", body: JSON.stringify(data) });
      out.className = ""; out.textContent = "submitted: " + r.path;
      ev.target.body.value = "";
    } catch (e) { out.className = "problem"; out.textContent = String(e.message || e); }
  });
  let filterTimer = null;
  $("#filters").addEventListener("input", () => { clearTimeout(filterTimer); filterTimer = setTimeout(() => loadPage(false), 250); });
  $("#filters").addEventListener("submit", (ev) => { ev.preventDefault(); loadPage(false); });
  $("#more").addEventListener("click", () => loadPage(true));
  $("#filters").state.append(...STATES.map((s) => el("option", { value: s }, s)));

  // -- usage -------------------------------------------------------------------------------
  function bars(rows, label) {
    const ns = "http://www.w3.org/2000/svg", W = 600, row = 22, left = 110, H = Math.max(1, rows.length) * row + 8;
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H); svg.setAttribute("role", "img"); svg.setAttribute("aria-label", label);
    const max = Math.max(1e-9, ...rows.map((r) => r.value));
    rows.forEach((r, i) => {
      const y = 4 + i * row, w = Math.max(1, (W - left - 90) * r.value / max);
      const t = document.createElementNS(ns, "text"); t.setAttribute("x", 4); t.setAttribute("y", y + 15); t.textContent = r.key;
      const b = document.createElementNS(ns, "rect"); b.setAttribute("x", left); b.setAttribute("y", y + 3); b.setAttribute("width", w); b.setAttribute("height", row - 6);
      const v = document.createElementNS(ns, "text"); v.setAttribute("x", left + w + 4); v.setAttribute("y", y + 15); v.textContent = r.text;
      svg.append(t, b, v);
    });
    return svg;
  }
  // One bar per budget: spent of limit, red once reached, with what it holds and when it resets.
  function money(v, unit) { return unit === "usd" ? "$" + v.toFixed(2) : Math.round(v).toLocaleString() + " tokens"; }
  async function showBudgets() {
    const b = await api("api/budgets");
    $("#budgets").hidden = !b.budgets.length;
    if (!b.budgets.length) return;
    $("#budgets-note").textContent = "days begin at 00:00 " + b.timezone + " · on_budget = " + b.on_budget;
    $("#budget-bars").replaceChildren(...b.budgets.map((r) => {
      const meter = el("meter", { min: "0", max: String(r.limit), value: String(Math.min(r.spent, r.limit)),
        high: String(r.limit * 0.8), optimum: "0", title: r.key });
      const held = r.reached ? " · " + r.held + " held" : "";
      const text = r.scope + " · " + r.period + ": " + money(r.spent, r.unit) + " of " + money(r.limit, r.unit) +
        held + " · resets " + r.resets;
      const row = el("div", { class: r.reached ? "budget reached" : "budget" }, el("span", {}, text), meter);
      if (r.reason) row.append(el("p", { class: "budget-reason" }, r.reason));
      return row;
    }));
  }
  async function showUsage() {
    showBudgets().catch((e) => problem(String(e.message || e)));
    try {
      const [day, agent] = await Promise.all([api("api/usage?by=day"), api("api/usage?by=agent")]);
      const pts = (u) => u.rows.map((r) => ({ key: r.key, value: r.cost_usd, text: "$" + r.cost_usd.toFixed(2) + " · " + r.jobs + " jobs" }));
      $("#chart-day").replaceChildren(bars(pts(day).slice(-30), "cost per day"));
      $("#chart-agent").replaceChildren(bars(pts(agent), "cost per agent"));
      $("#usage-table tbody").replaceChildren(...agent.rows.concat([agent.total]).map((r) => el("tr", {},
        el("td", {}, r.key), el("td", {}, r.jobs), el("td", {}, r.input_tokens.toLocaleString()),
        el("td", {}, r.output_tokens.toLocaleString()), el("td", {}, "$" + r.cost_usd.toFixed(4)))));
    } catch (e) { problem(String(e.message || e)); }
  }

  // -- routing -------------------------------------------------------------------------------
  function route() {
    const hash = location.hash || "#/";
    const m = /^#\/job\/(.+)$/.exec(hash);
    for (const v of ["jobs", "job", "submit", "usage"]) $("#view-" + v).hidden = true;
    if (m) { $("#view-job").hidden = false; const id = decodeURIComponent(m[1]); if (id !== current) showJob(id); else terminal(); return; }
    closeJobStreams(); current = null;
    if (hash === "#/submit") $("#view-submit").hidden = false;
    else if (hash === "#/usage") { $("#view-usage").hidden = false; showUsage(); }
    else { $("#view-jobs").hidden = false; if (loaded) loadPage(false); }
  }
  window.addEventListener("hashchange", route);
  setInterval(() => { if (!$("#view-jobs").hidden && rows.some((j) => j.state === "running")) renderList(); }, 1000);
  renderCounts(null);
  connectList();
  route();
})();
