// Bittern web UI: live updates, the component graph (dagre lays it out), the charts
// (uPlot) and the actions. The pages are complete without this file; it only adds.
// The API token is kept in this tab's sessionStorage and sent in the Authorization
// header: never in a URL, never in a cookie. Everything shown is either HTML the server
// escaped (swapped in by id) or text set with textContent / SVG text nodes.
(function () {
  "use strict";
  var KEY = "bittern.token";
  var POLL_MS = 2000;
  var CHART_SECS = 600;
  var body = document.body;
  var data = body.dataset;
  var SVG = "http://www.w3.org/2000/svg";

  function token() { try { return sessionStorage.getItem(KEY) || ""; } catch (e) { return ""; } }
  function headers(extra) {
    var h = extra || {};
    if (token()) { h.Authorization = "Bearer " + token(); }
    return h;
  }
  function status(text, bad) {
    var el = document.getElementById("status");
    if (el) { el.textContent = text; el.className = bad ? "bad" : ""; }
  }
  function enc(s) { return encodeURIComponent(s); }
  function topoPath() { return "/api/v1/topologies/" + enc(data.topology); }

  // -- sign in ----------------------------------------------------------------------------
  var signin = document.getElementById("signin");
  var form = document.getElementById("signin-form");
  if (form) {
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var input = document.getElementById("token");
      try { sessionStorage.setItem(KEY, input.value.trim()); } catch (e) { /* private mode */ }
      input.value = "";
      refresh(true);
    });
  }
  function showSignin(show) { if (signin) { signin.hidden = !show; } }

  // -- live updates: the server's HTML, swapped in by element id ------------------------------
  var signedIn = data.signedIn === "1";
  function fragmentUrl() {
    var q = new URLSearchParams(location.search);
    q.set("fragment", "1");
    return location.pathname + "?" + q.toString();
  }
  // the last page this tab was shown, per URL: drawn at once on the next visit while the
  // fresh one is fetched (a navigation is otherwise two round trips: page, then fragment)
  var CACHE = "bittern.page:";
  var CACHE_MAX = 256 * 1024;
  function cacheKey() { return CACHE + location.pathname + location.search; }
  function cacheGet() { try { return sessionStorage.getItem(cacheKey()); } catch (e) { return null; } }
  function cachePut(html) {
    try { if (html.length <= CACHE_MAX) { sessionStorage.setItem(cacheKey(), html); } } catch (e) { /* full */ }
  }
  function cacheClear() {
    try {
      for (var i = sessionStorage.length - 1; i >= 0; i--) {
        var k = sessionStorage.key(i);
        if (k && k.indexOf(CACHE) === 0) { sessionStorage.removeItem(k); }
      }
    } catch (e) { /* private mode */ }
  }
  function paint(html) {
    var doc = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
    var main = document.getElementById("live");
    main.replaceChildren.apply(main, Array.prototype.slice.call(doc.body.firstChild.childNodes));
    wire();
    drawGraph();
  }
  function refresh(whole) {
    return fetch(fragmentUrl(), {headers: headers(), cache: "no-store"}).then(function (r) {
      if (r.status === 401) {
        showSignin(true);
        status(token() ? "the token was refused: sign in again" : "sign in to see this page", true);
        return null;
      }
      return r.text().then(function (html) {
        var doc = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
        var main = document.getElementById("live");
        if (whole || !signedIn) {
          main.replaceChildren.apply(main, Array.prototype.slice.call(doc.body.firstChild.childNodes));
          signedIn = true;
          wire();
        } else {
          doc.querySelectorAll("[data-live][id]").forEach(function (fresh) {
            var old = document.getElementById(fresh.id);
            if (old) { old.replaceWith(fresh); }
          });
        }
        showSignin(false);
        if (r.status !== 200) { status("the server answered " + r.status, true); return null; }
        cachePut(html);
        status("updated " + new Date().toLocaleTimeString());
        drawGraph();
        followLog();
        return true;
      });
    }).catch(function (err) { status("no answer from the server: " + err, true); });
  }

  // -- the component graph -----------------------------------------------------------------
  function capColour(n) {
    if (n.status === "backpressure") { return "#f4a6a6"; }
    if (n.kind === "spout") { return "#cfe3fb"; }
    var c = Math.max(0, Math.min(1, n.capacity || 0));
    return "hsl(" + Math.round(120 - 120 * c) + ",70%," + Math.round(85 - 15 * c) + "%)";
  }
  function fmtRate(v) {
    if (typeof v !== "number") { return "-"; }
    return v >= 100 ? Math.round(v).toLocaleString() : v.toFixed(1);
  }
  function el(tag, attrs, text) {
    var x = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { x.setAttribute(k, attrs[k]); });
    if (text !== undefined) { x.textContent = text; }
    return x;
  }
  function drawGraph() {
    var box = document.getElementById("graph");
    if (!box || !box.dataset.graph || typeof dagre === "undefined") { return; }
    var g = JSON.parse(box.dataset.graph);
    var lay = new dagre.graphlib.Graph({multigraph: true});
    lay.setGraph({rankdir: "LR", nodesep: 30, ranksep: 90, marginx: 10, marginy: 10});
    lay.setDefaultEdgeLabel(function () { return {}; });
    g.nodes.forEach(function (n) { lay.setNode(n.id, {width: 170, height: 58}); });
    g.edges.forEach(function (ed, i) {
      lay.setEdge(ed.from, ed.to, {width: 150, height: 18, labelpos: "c"}, "e" + i);
    });
    dagre.layout(lay);
    var size = lay.graph();
    var svg = el("svg", {width: Math.max(size.width, 200), height: Math.max(size.height, 80), role: "group",
                         "aria-label": "component graph: " + g.nodes.length + " components, " +
                         g.edges.length + " streams"});
    var defs = el("defs");
    var marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8,
                               markerHeight: 8, orient: "auto-start-reverse"});
    marker.appendChild(el("path", {d: "M 0 0 L 10 5 L 0 10 z", "class": "arrowhead"}));
    defs.appendChild(marker);
    svg.appendChild(defs);
    g.edges.forEach(function (ed, i) {
      var e = lay.edge({v: ed.from, w: ed.to, name: "e" + i});
      var d = e.points.map(function (p, j) { return (j ? "L" : "M") + p.x + " " + p.y; }).join(" ");
      var grp = el("g", {"class": "edge", "data-from": ed.from, "data-to": ed.to});
      grp.appendChild(el("path", {d: d, "marker-end": "url(#arrow)"}));
      var label = ed.grouping + " · " + fmtRate(ed.rate) + "/s";
      grp.appendChild(el("text", {x: e.x, y: e.y + 4, "text-anchor": "middle", "class": "edge-label"}, label));
      grp.appendChild(el("title", {}, ed.from + " → " + ed.to + " (" + ed.stream + "): " + label));
      svg.appendChild(grp);
    });
    g.nodes.forEach(function (n) {
      var p = lay.node(n.id);
      var a = el("a", {href: "/ui/topologies/" + enc(data.topology) + "/components/" + enc(n.id),
                       "class": "node st-" + n.status, "data-node": n.id,
                       "aria-label": n.id + ": " + n.kind + ", " + n.par + " tasks, " + n.status});
      a.appendChild(el("rect", {x: p.x - 85, y: p.y - 29, width: 170, height: 58, rx: 6, fill: capColour(n),
                                "class": n.status === "backpressure" ? "bp" : ""}));
      a.appendChild(el("text", {x: p.x, y: p.y - 8, "text-anchor": "middle", "class": "node-name"},
                       n.id + " ×" + n.par));
      var detail = n.status.toUpperCase() + (n.kind === "spout" ? "" : " · cap " + (n.capacity || 0).toFixed(2))
        + " · " + fmtRate(n.rate) + "/s";
      a.appendChild(el("text", {x: p.x, y: p.y + 14, "text-anchor": "middle"}, detail));
      svg.appendChild(a);
    });
    box.replaceChildren(svg);
  }

  // -- charts (uPlot) over the JSON API ----------------------------------------------------
  var charts = {};
  var series = {t: [], a: [], b: []};
  function chart(id, title, labels, xs, ys1, ys2) {
    var box = document.getElementById(id);
    if (!box || typeof uPlot === "undefined") { return; }
    var dataArr = [xs, ys1, ys2];
    if (charts[id] && charts[id].root.isConnected) { charts[id].setData(dataArr); return; }
    box.replaceChildren();
    charts[id] = new uPlot({title: title, width: Math.max(300, Math.min(900, box.clientWidth || 600)), height: 200,
      series: [{}, {label: labels[0], stroke: "#1f6fb2", width: 2}, {label: labels[1], stroke: "#c2410c", width: 2,
               dash: [6, 4]}]}, dataArr, box);
    box.dataset.points = String(xs.length);
  }
  function pollCharts() {
    if (!signedIn && !token()) { return; }
    var now = Date.now() / 1000;
    if (data.page === "topology") {
      fetch(topoPath() + "/metrics?window=1m", {headers: headers(), cache: "no-store"}).then(function (r) {
        return r.ok ? r.json() : null;
      }).then(function (m) {
        if (!m) { return; }
        var tp = (m.throughput || []).slice().reverse();
        chart("chart-throughput", "Throughput (tuples/s)", ["spouts emit", "bolts execute"],
              tp.map(function (p) { return now - p.ago_secs; }), tp.map(function (p) { return p.emit_rate; }),
              tp.map(function (p) { return p.execute_rate; }));
        var exec = 0, n = 0, compl = 0, cn = 0;
        Object.keys(m.components || {}).forEach(function (k) {
          var c = m.components[k];
          if (c.execute_latency_count) { exec += c.execute_latency_ms * c.execute_latency_count; n += c.execute_latency_count; }
          if (c.complete_latency_count) { compl += c.complete_latency_ms * c.complete_latency_count; cn += c.complete_latency_count; }
        });
        push(now, n ? exec / n : null, cn ? compl / cn : null);
        chart("chart-latency", "Latency (ms, mean over 1 min; since this page opened)", ["execute", "complete"],
              series.t, series.a, series.b);
      });
    } else if (data.page === "component") {
      fetch(topoPath() + "/components/" + enc(data.component) + "?window=1m", {headers: headers(), cache: "no-store"})
        .then(function (r) { return r.ok ? r.json() : null; }).then(function (d) {
          if (!d) { return; }
          var m = d.metrics || {};
          push(now, m.emit_rate || 0, m.execute_rate || 0);
          chart("chart-rate", "Rates (tuples/s)", ["emit", "execute"], series.t, series.a, series.b);
          lat.t.push(now); lat.a.push(m.execute_latency_ms || null); lat.b.push(m.complete_latency_ms || null);
          trim(lat);
          chart("chart-latency", "Latency (ms)", ["execute", "complete"], lat.t, lat.a, lat.b);
        });
    }
  }
  var lat = {t: [], a: [], b: []};
  function trim(s) {
    while (s.t.length && s.t[0] < s.t[s.t.length - 1] - CHART_SECS) { s.t.shift(); s.a.shift(); s.b.shift(); }
  }
  function push(t, a, b) { series.t.push(t); series.a.push(a); series.b.push(b); trim(series); }

  // -- actions ------------------------------------------------------------------------------
  function say(text, bad) {
    var out = document.getElementById("action-result");
    if (out) { out.textContent = text; out.className = bad ? "bad" : "good"; }
  }
  function act(method, path, payload, done) {
    if (!token() && data.mode === "cluster") {
      showSignin(true);
      say("sign in with the API token first: actions send it in a header", true);
      return;
    }
    say(method + " " + path + " ...");
    var h = headers(payload ? {"Content-Type": "application/json"} : {});
    fetch(path, {method: method, headers: h, body: payload ? JSON.stringify(payload) : undefined, cache: "no-store"})
      .then(function (r) {
        return r.json().catch(function () { return {}; }).then(function (doc) {
          if (!r.ok) { say("refused (" + r.status + "): " + (doc.error || "error"), true); return; }
          say("done: " + method + " " + path);
          if (done) { done(doc); }
          refresh(false);
        });
      }).catch(function (err) { say("no answer: " + err, true); });
  }
  function wire() {
    var panel = document.getElementById("actions");
    if (!panel || panel.dataset.wired || !panel.dataset.topology) { return; }
    panel.dataset.wired = "1";
    var path = "/api/v1/topologies/" + enc(panel.dataset.topology);
    panel.querySelectorAll("button[data-action]").forEach(function (b) {
      b.addEventListener("click", function () {
        var verb = b.dataset.action;
        if (verb === "kill") {
          if (!window.confirm("Kill topology " + panel.dataset.topology + "? Every process stops and its state is removed.")) {
            say("kill cancelled");
            return;
          }
          act("DELETE", path, null, function () { location.assign("/ui/"); });
        } else {
          act("POST", path + "/" + verb, null);
        }
      });
    });
    panel.querySelectorAll("form.rebalance").forEach(function (f) {
      f.addEventListener("submit", function (ev) {
        ev.preventDefault();
        var par = {};
        par[f.dataset.component] = parseInt(f.elements.par.value, 10);
        act("POST", path + "/rebalance", {parallelism: par});
      });
    });
  }

  // -- logs ---------------------------------------------------------------------------------
  function followLog() {
    var box = document.getElementById("follow");
    var log = document.getElementById("log");
    if (box && box.checked && log) { log.scrollTop = log.scrollHeight; }
  }

  // -- start --------------------------------------------------------------------------------
  function start() {
    var out = document.createElement("p");
    var signout = document.createElement("button");
    signout.type = "button";
    signout.textContent = "Sign out";
    signout.addEventListener("click", function () { sessionStorage.removeItem(KEY); cacheClear(); location.reload(); });
    if (token()) { out.appendChild(signout); document.querySelector("header").appendChild(out); }
    wire();
    drawGraph();
    if (!signedIn && token()) {
      var cached = cacheGet();
      if (cached) { paint(cached); status("as last shown; updating..."); }
      refresh(true);
    }
    if (!signedIn && !token()) { showSignin(true); }
    setInterval(function () {
      if (data.page === "logs") {
        var box = document.getElementById("follow");
        if (!box || !box.checked) { return; }
      }
      if (signedIn || token()) { refresh(false); }
    }, POLL_MS);
    pollCharts();
    setInterval(pollCharts, POLL_MS);
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
}());
