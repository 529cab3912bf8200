// Bittern web UI: live updates, the component graph (dagre lays it out), the charts
// (uPlot) and the actions. The pages are complete without this file; it only adds.
// The API token is kept in this tab's sessionStorage and sent in the Authorization
// header: never in a URL, never in a cookie. Everything shown is either HTML the server
// escaped (swapped in by id) or text set with textContent / SVG text nodes.
(function () {
  "use strict";
  var KEY = "bittern.token";
  var POLL_MS = 2000;
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
  function cacheGet() {
    try { return JSON.parse(sessionStorage.getItem(cacheKey()) || "null"); } catch (e) { return null; }
  }
  function cachePut(html) {
    try {
      if (html.length <= CACHE_MAX) { sessionStorage.setItem(cacheKey(), JSON.stringify({t: dataTime, html: html})); }
    } catch (e) { /* full */ }
  }
  function cacheClear() {
    try {
      for (var i = sessionStorage.length - 1; i >= 0; i--) {
        var k = sessionStorage.key(i);
        if (k && k.indexOf(CACHE) === 0) { sessionStorage.removeItem(k); }
      }
    } catch (e) { /* private mode */ }
  }
  function paint(cached) {
    var doc = new DOMParser().parseFromString("<main>" + cached.html + "</main>", "text/html");
    var main = document.getElementById("live");
    main.replaceChildren.apply(main, Array.prototype.slice.call(doc.body.firstChild.childNodes));
    dataTime = cached.t || dataTime;
    wire();
    draw();
  }
  // when the data on the page was fetched: the charts' points are ages before it
  var dataTime = Date.now() / 1000;
  function swapIn(fresh) {
    var old = document.getElementById(fresh.id);
    if (!old) { return; }
    if (old.classList.contains("chart") && charts[old.id]) {  // keep the chart: new data only
      ["series", "points", "title"].forEach(function (k) { old.dataset[k] = fresh.dataset[k] || ""; });
    } else {
      old.replaceWith(fresh);
    }
  }
  var shown = 200;  // the status of what the page shows now (an error page, or the real one)
  function liveIds(root) {
    return Array.prototype.map.call(root.querySelectorAll("[data-live][id]"), function (x) { return x.id; }).join(" ");
  }
  function sameShape(doc) { return liveIds(doc) === liveIds(document.getElementById("live")); }
  function replaceAll(doc, keepActions) {
    var main = document.getElementById("live");
    var panel = keepActions ? document.getElementById("actions") : null;  // (an action's outcome in it)
    main.replaceChildren.apply(main, Array.prototype.slice.call(doc.body.firstChild.childNodes));
    var fresh = panel && document.getElementById("actions");
    if (fresh) { fresh.replaceWith(panel); }
  }
  function refresh(whole) {
    var asked = Date.now() / 1000;
    return fetch(fragmentUrl(), {headers: headers(), cache: "no-store"}).then(function (r) {
      if (r.status === 401) {
        showSignin(true);
        status(token() ? "the token was refused: sign in again" : "sign in to see this page", true);
        return null;
      }
      return r.text().then(function (html) {
        var doc = new DOMParser().parseFromString("<main>" + html + "</main>", "text/html");
        dataTime = asked;
        if (whole || !signedIn) {
          replaceAll(doc, false);
          signedIn = true;
          shown = r.status;
          wire();
        } else if (r.status === 200 && (shown !== 200 || !sameShape(doc))) {
          // the page changed its shape (an error page that is a topology's again, a table
          // that came or went): swapping the live parts in by id would keep the old one
          replaceAll(doc, true);
          shown = 200;
          wire();
        } else if (r.status === 200) {
          doc.querySelectorAll("[data-live][id]").forEach(swapIn);
        }  // (an error while a good page is shown: it stays, the status line says what happened)
        showSignin(false);
        if (r.status !== 200) { status("the server answered " + r.status, true); return null; }
        cachePut(html);
        status("updated " + new Date().toLocaleTimeString());
        draw();
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

  // -- charts (uPlot): the series come with the page (data-series), 10 minutes of them --------
  var charts = {};
  var COLOURS = [["#1f6fb2", null], ["#c2410c", [6, 4]]];  // colour and dash: not the colour alone
  function drawChart(box) {
    var d;
    try { d = JSON.parse(box.dataset.series || "null"); } catch (e) { d = null; }
    if (!d || !d.ago_secs) { return; }
    var xs = d.ago_secs.map(function (a) { return dataTime - a; });
    var arr = [xs].concat(d.series.map(function (s) { return s.values; }));
    var key = d.series.map(function (s) { return s.key; }).join(",");
    var c = charts[box.id];
    if (c && c.bitternKey === key && box.contains(c.root)) {
      c.setData(arr);
    } else {
      if (c) { c.destroy(); }
      box.replaceChildren();
      c = charts[box.id] = new uPlot({
        title: box.dataset.title || "", width: Math.max(300, Math.min(900, box.clientWidth || 600)), height: 200,
        series: [{}].concat(d.series.map(function (s, i) {
          var look = COLOURS[i % COLOURS.length];
          return {label: s.label, stroke: look[0], width: 2, dash: look[1] || undefined};
        }))}, arr, box);
      c.bitternKey = key;
    }
    box.dataset.points = String(xs.length);
  }
  function drawCharts() {
    if (typeof uPlot === "undefined") { return; }
    Object.keys(charts).forEach(function (id) {  // charts no longer on the page
      if (!charts[id].root.isConnected) { charts[id].destroy(); delete charts[id]; }
    });
    document.querySelectorAll(".chart[data-series]").forEach(drawChart);
  }
  function draw() { drawGraph(); drawCharts(); }

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
    // (redirects not followed: a nimbus that stopped leading answers 307 to the leader, which
    // would get neither the token nor this origin's leave to answer)
    fetch(path, {method: method, headers: h, body: payload ? JSON.stringify(payload) : undefined, cache: "no-store",
                 redirect: "manual"})
      .then(function (r) {
        if (r.type === "opaqueredirect") {
          say("refused: this nimbus is a standby now; take actions on the leader (the Cluster page names it)", true);
          return;
        }
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
    // the fresh page is asked for first; the graph and charts are drawn as soon as both it
    // (or the copy this tab last showed) and the libraries are there
    var first = null;
    if (!signedIn && token()) {
      var cached = cacheGet();
      if (cached && cached.html) { paint(cached); status("as last shown; updating..."); }
      first = refresh(true);
    }
    if (!signedIn && !token()) { showSignin(true); }
    draw();
    if (first) { first.then(poll, poll); } else { poll(); }
  }
  // a live update every POLL_MS after the last one answered (never two in flight)
  function poll() {
    setTimeout(function () {
      var box = document.getElementById("follow");
      var due = (signedIn || token()) && (data.page !== "logs" || (box && box.checked));
      var p = due ? refresh(false) : null;
      if (p) { p.then(poll, poll); } else { poll(); }
    }, POLL_MS);
  }
  // app.js comes first of the deferred scripts: it asks for the page at once; the libraries
  // (dagre, uPlot) run after it, before DOMContentLoaded, when the page is drawn
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
  if (document.readyState !== "complete") { document.addEventListener("DOMContentLoaded", draw); }
}());
