// dlrun ui: the pages' script. Everything it shows is set as text (textContent, SVG text nodes): a job
// name, a log line or a metric name holding HTML stays text. The token goes in a header on every call.
"use strict";
(function () {
  const TOKEN = document.querySelector('meta[name="dlrun-token"]').content;
  const TOKEN_HEADER = document.querySelector('meta[name="dlrun-token-header"]').content;
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 2000;
  const COLORS = { local: "#2ca02c", aws: "#ff7f0e", gcp: "#1f77b4", cluster: "#9467bd" };

  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function withToken(path) {
    return path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN);
  }
  async function api(path, method) {
    const r = await fetch(path, { method: method || "GET", headers: { [TOKEN_HEADER]: TOKEN },
                                  credentials: "omit", cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    return r.json();
  }
  function initial(id) { return JSON.parse(document.getElementById(id || "initial").textContent); }
  const num = (v, d) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
  const usd = (v) => (v === null || v === undefined ? "–" : "$" + Number(v).toFixed(4));
  function duration(s) {
    s = Math.max(0, Math.round(s));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return h ? h + "h" + String(m).padStart(2, "0") + "m" : m ? m + "m" + String(s % 60).padStart(2, "0") + "s" : s + "s";
  }

  // --- charts: axes, scatter, lines, bars; every label a text node --------------------------------
  function frame(svg, xs, ys, xLabel, yLabel, top) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = +svg.getAttribute("width"), H = +svg.getAttribute("height");
    const m = { l: 64, r: 16, t: top || 12, b: 40 };
    let [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(0, ...ys), Math.max(...ys)];
    if (x1 === x0) { x0 -= x0 ? Math.abs(x0) * 0.1 : 1; x1 += x1 ? Math.abs(x1) * 0.1 : 1; }
    if (y1 === y0) { y1 += y1 ? Math.abs(y1) * 0.1 : 1; }
    const px = (x) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
    const py = (y) => H - m.b - ((y - y0) / (y1 - y0)) * (H - m.t - m.b);
    svg.appendChild(svgEl("line", { x1: m.l, y1: H - m.b, x2: W - m.r, y2: H - m.b, class: "axis" }));
    svg.appendChild(svgEl("line", { x1: m.l, y1: m.t, x2: m.l, y2: H - m.b, class: "axis" }));
    for (let i = 0; i <= 4; i++) {
      const xv = x0 + ((x1 - x0) * i) / 4, yv = y0 + ((y1 - y0) * i) / 4;
      svg.appendChild(svgEl("text", { x: px(xv), y: H - m.b + 14, class: "tick", "text-anchor": "middle" }, +xv.toPrecision(3)));
      svg.appendChild(svgEl("text", { x: m.l - 4, y: py(yv) + 4, class: "tick", "text-anchor": "end" }, +yv.toPrecision(3)));
    }
    svg.appendChild(svgEl("text", { x: (W + m.l) / 2, y: H - 6, class: "label", "text-anchor": "middle" }, xLabel));
    svg.appendChild(svgEl("text", { x: 12, y: (H - m.b + m.t) / 2, class: "label", "text-anchor": "middle",
                                    transform: `rotate(-90 12 ${(H - m.b + m.t) / 2})` }, yLabel));
    return { px, py };
  }

  function legend(svg, items) {
    // items: [[class of the swatch, its SVG tag and attributes, the words]], drawn at the top right
    const W = +svg.getAttribute("width"), box = svgEl("g", { class: "legend-box" });
    items.forEach(([tag, attrs, words], i) => {
      const y = 18 + i * 15, x = W - 190;
      box.appendChild(svgEl(tag, Object.assign({}, attrs, tag === "line" ? { x1: x, x2: x + 14, y1: y - 4, y2: y - 4 }
        : tag === "rect" ? { x, y: y - 9, width: 12, height: 9 } : { cx: x + 6, cy: y - 4 })));
      box.appendChild(svgEl("text", { x: x + 20, y, class: "legend" }, words));
    });
    svg.appendChild(box);
  }

  function planChart(svg, plan) {
    const pts = plan.points;
    if (!pts.length) { svg.replaceWith(el("p", "no plan was recorded for this job", { class: "muted" })); return; }
    const { px, py } = frame(svg, pts.map((p) => p.hours), pts.map((p) => p.cost), "estimated hours", "estimated $");
    const front = plan.frontier.map((i) => pts[i]);
    if (front.length > 1) {
      svg.appendChild(svgEl("polyline", { class: "frontier", points: front.map((p) => px(p.hours) + "," + py(p.cost)).join(" ") }));
    }
    if (plan.max_cost) {
      svg.appendChild(svgEl("line", { class: "budget", x1: px(Math.min(...pts.map((p) => p.hours))), x2: px(Math.max(...pts.map((p) => p.hours))),
                                      y1: py(plan.max_cost), y2: py(plan.max_cost) }));
    }
    const onFront = new Set(plan.frontier);
    pts.forEach((p, i) => {
      const kind = p.chosen ? "chosen" : !p.feasible ? "excluded" : onFront.has(i) ? "front" : "candidate";
      const dot = svgEl("circle", { cx: px(p.hours), cy: py(p.cost), r: p.chosen ? 7 : 4, class: "point " + kind,
                                    fill: p.feasible ? COLORS[p.backend] || "#555" : "none",
                                    stroke: COLORS[p.backend] || "#555" });
      dot.appendChild(svgEl("title", {}, p.offer + ": " + num(p.hours, 3) + " h, " + usd(p.cost) +
                                          (p.chosen ? " (chosen)" : !p.feasible ? " — excluded: " + (p.why || "") : "")));
      svg.appendChild(dot);
    });
    legend(svg, [["circle", { r: 6, class: "point chosen", fill: "#fff" }, "chosen"],
                 ["line", { class: "frontier" }, "cheapest per deadline"],
                 ["circle", { r: 4, class: "point excluded", fill: "none", stroke: "#555" }, "excluded (hover: why)"],
                 ["line", { class: "budget" }, "--max-cost"]]);
  }

  function lineChart(svg, points, name) {
    const { px, py } = frame(svg, points.map((p) => p[0]), points.map((p) => p[1]), "epoch", name);
    svg.appendChild(svgEl("polyline", { class: "curve", points: points.map((p) => px(p[0]) + "," + py(p[1])).join(" ") }));
    points.forEach((p) => svg.appendChild(svgEl("circle", { cx: px(p[0]), cy: py(p[1]), r: 2.5, class: "curve-point" })));
  }

  function barChart(svg, groups, yLabel, fmt) {
    // groups: [{label, est, actual}]: two bars each, the estimate hollow and the actual filled
    if (!groups.length) return;
    fmt = fmt || usd;
    const vals = groups.flatMap((g) => [g.est, g.actual]);
    frame(svg, [0, 1], vals.concat([0]), "", yLabel, 40);
    while (svg.querySelector("text.tick[text-anchor=middle]")) svg.querySelector("text.tick[text-anchor=middle]").remove();
    const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), top = Math.max(...vals, 1e-9);
    const left = 64, bottom = 40, width = Math.min(90, (W - left - 16) / groups.length);
    const h = (v) => ((H - bottom - 40) * v) / top;
    groups.forEach((g, i) => {
      const x = left + i * width + width * 0.15, bw = width * 0.35;
      const est = svgEl("rect", { x, y: H - bottom - h(g.est), width: bw, height: h(g.est), class: "bar-est" });
      est.appendChild(svgEl("title", {}, g.label + " estimated: " + fmt(g.est)));
      const act = svgEl("rect", { x: x + bw, y: H - bottom - h(g.actual), width: bw, height: h(g.actual), class: "bar-actual" });
      act.appendChild(svgEl("title", {}, g.label + " actual: " + fmt(g.actual)));
      svg.append(est, act, svgEl("text", { x: x + bw, y: H - bottom + 14, class: "tick", "text-anchor": "middle" }, g.label));
    });
    legend(svg, [["rect", { class: "bar-est" }, "estimated"], ["rect", { class: "bar-actual" }, "actual"]]);
  }

  // --- the jobs page --------------------------------------------------------------------------------
  function jobsPage() {
    const form = document.getElementById("filters"), body = document.querySelector("#jobs tbody");
    const asked = new URLSearchParams(window.location.search);  // the filters of the URL the page was opened at
    for (const field of ["status", "backend", "schedule", "name"]) if (asked.get(field)) form.elements[field].value = asked.get(field);
    let page = Math.max(0, parseInt(asked.get("page") || "0", 10) || 0), shown = initial();
    function query() {
      const q = new URLSearchParams();
      for (const [k, v] of new FormData(form)) if (v) q.set(k, v);
      q.set("page", page);
      return q.toString();
    }
    function remember() {  // the URL keeps the filters (a reload or a bookmark shows the same jobs)
      window.history.replaceState(null, "", "/?" + query() + "&token=" + encodeURIComponent(TOKEN));
    }
    function render(data) {
      shown = data;
      const rows = data.jobs.map((j) => {
        const tr = el("tr", null, { class: "job " + j.status.toLowerCase(), "data-job": j.id });
        const a = el("a", j.id, { href: withToken("/jobs/" + encodeURIComponent(j.id)) });
        const idCell = el("td"); idCell.appendChild(a);
        tr.append(idCell, el("td", j.name), el("td", j.status, { class: "status" }), el("td", j.backend || "–"),
                  el("td", j.started || j.created), el("td", duration(j.elapsed_s)),
                  el("td", usd(j.cost_so_far) + (j.max_cost ? " / $" + Number(j.max_cost).toFixed(2) : "")),
                  el("td", num(j.est_hours, 3)), el("td", num(j.actual_hours, 3)), el("td", usd(j.est_cost)));
        return tr;
      });
      body.replaceChildren(...rows);
      const first = data.total ? data.page * data.per_page + 1 : 0;
      document.getElementById("range").textContent =
        first + "–" + (data.page * data.per_page + data.jobs.length) + " of " + data.total + " jobs";
      document.getElementById("prev").disabled = data.page === 0;
      document.getElementById("next").disabled = (data.page + 1) * data.per_page >= data.total;
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    }
    async function refresh() {
      try { render(await api("/api/jobs?" + query())); } catch (e) { document.getElementById("updated").textContent = String(e); }
    }
    const changed = () => { remember(); refresh(); };
    form.addEventListener("input", () => { page = 0; changed(); });
    form.addEventListener("submit", (e) => { e.preventDefault(); page = 0; changed(); });
    document.getElementById("prev").addEventListener("click", () => { page = Math.max(0, page - 1); changed(); });
    document.getElementById("next").addEventListener("click", () => { page += 1; changed(); });
    render(shown);
    setInterval(refresh, POLL_MS);
  }

  // --- a job's page ----------------------------------------------------------------------------------
  function jobPage() {
    const jobId = document.getElementById("job-id").dataset.job;
    const base = "/api/jobs/" + encodeURIComponent(jobId);
    const log = document.getElementById("log"), cancel = document.getElementById("cancel");
    let logAfter = -1, live = true, curvesKey = "";
    planChart(document.getElementById("plan-chart"), initial("plan"));

    function render(v) {
      const j = v.job;
      live = j.live;
      document.getElementById("status").textContent = j.status;
      document.getElementById("status").className = "status " + j.status.toLowerCase();
      document.getElementById("summary").textContent =
        (j.backend || "not launched yet") + (j.gpu ? " · " + j.gpu : "") + (j.spot ? " spot" : "") +
        " · started " + (j.started || "–") + " · elapsed " + duration(j.elapsed_s) +
        " · cost so far " + usd(j.cost_so_far) + (j.max_cost ? " of $" + Number(j.max_cost).toFixed(2) : "") +
        " · estimated " + num(j.est_hours, 3) + " h, " + usd(j.est_cost) +
        " · actual " + num(j.actual_hours, 3) + " h";
      document.getElementById("message").textContent = j.message || "";
      const dash = document.getElementById("dashboard");
      document.getElementById("dashboard-box").hidden = !v.dashboard;
      if (v.dashboard) dash.href = v.dashboard;
      document.getElementById("cluster-gone").hidden = !v.cluster_gone;
      cancel.hidden = !j.live;
      document.querySelector("#events tbody").replaceChildren(...v.events.map((e) => {
        const tr = el("tr");
        tr.append(el("td", e.at), el("td", e.kind), el("td", e.status || ""), el("td", e.detail));
        return tr;
      }));
      const key = JSON.stringify(v.curves.series.map((s) => s.points.length));
      if (key !== curvesKey) { curvesKey = key; drawCurves(v.curves.series); }
    }
    function drawCurves(series) {
      const box = document.getElementById("curves");
      box.replaceChildren();
      if (!series.length) { box.appendChild(el("p", "nothing reported yet", { class: "muted" })); return; }
      for (const s of series) {
        const fig = el("figure", null, { class: "curve-figure" });
        fig.appendChild(el("figcaption", s.name));
        const svg = svgEl("svg", { width: 340, height: 200, class: "chart curve-chart", "data-metric": s.name });
        fig.appendChild(svg);
        box.appendChild(fig);
        lineChart(svg, s.points, s.name);
      }
    }
    async function tail() {
      const r = await api(base + "/log?after=" + logAfter);
      logAfter = r.offset;
      if (r.lines.length) {
        const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        log.append(document.createTextNode(r.lines.join("\n") + "\n"));
        if (atEnd) log.scrollTop = log.scrollHeight;
      }
    }
    async function refresh() {
      try { render(await api(base)); await tail(); } catch (e) { document.getElementById("message").textContent = String(e); }
    }
    cancel.addEventListener("click", async () => {
      if (!window.confirm("Cancel job " + jobId + "? Its Ray job is stopped and its cluster torn down.")) return;
      cancel.disabled = true;
      try {
        const r = await api(base + "/cancel", "POST");
        document.getElementById("cancel-result").textContent = r.message;
      } catch (e) { document.getElementById("cancel-result").textContent = String(e); }
      cancel.disabled = false;
      refresh();
    });
    render(initial());
    tail();
    setInterval(() => { if (live || logAfter < 0) refresh(); }, POLL_MS);
  }

  function schedulesPage() {
    const data = initial();
    document.querySelectorAll("svg.night-chart").forEach((svg) => {
      const runs = data[+svg.dataset.index].runs.slice(-30);
      if (!runs.length) { svg.remove(); return; }
      const label = (r) => (r.day || "").slice(5, 10);
      if (svg.dataset.measure === "hours") {
        barChart(svg, runs.map((r) => ({ label: label(r), est: r.est_hours, actual: r.hours })), "hours per night",
                 (v) => num(v, 2) + " h");
      } else {
        barChart(svg, runs.map((r) => ({ label: label(r), est: r.est_cost, actual: r.cost })), "$ per night");
      }
    });
  }

  function costPage() {
    const data = initial();
    barChart(document.getElementById("day-chart"),
             data.days.slice(0, 30).reverse().map((d) => ({ label: d.key.slice(5), est: d.est_cost, actual: d.actual_cost })), "$ per day");
    barChart(document.getElementById("backend-chart"),
             data.backends.map((b) => ({ label: b.key, est: b.est_cost, actual: b.actual_cost })), "$ per backend");
  }

  const pages = { jobs: jobsPage, job: jobPage, schedules: schedulesPage, cost: costPage };
  const run = pages[document.body.dataset.page];
  if (run) run();
})();
