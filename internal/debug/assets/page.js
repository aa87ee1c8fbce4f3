// ringxds debug page: asks /debug/pick where the typed key goes, marks the
// key on every drawing, and refreshes the clusters (only when the snapshot
// changed, by ETag) and the clients every two seconds. Plain script, no
// build step; everything it inserts as HTML was rendered and escaped by the
// server, everything from /debug/pick goes in as text.
"use strict";
(() => {
  const refreshEvery = 2000;
  const keyInput = document.getElementById("key");
  const clientSelect = document.getElementById("client");
  const clustersEl = document.getElementById("clusters");
  const clientsEl = document.getElementById("clients");
  const refreshEl = document.getElementById("refresh");
  let etag = null;
  let pickSeq = 0;
  let refreshing = false;

  const client = () => clientSelect.value;
  const key = () => keyInput.value;

  // Keep the key and kind in the address, so a reload or a shared link
  // shows the same view.
  function remember() {
    const u = new URL(location.href);
    if (key()) u.searchParams.set("key", key()); else u.searchParams.delete("key");
    u.searchParams.set("client", client());
    history.replaceState(null, "", u);
  }

  // position is where a request hash lands on a drawing, as a fraction of
  // the way round the ring or along the table.
  function position(section, hash) {
    const h = BigInt(hash);
    if (section.dataset.strip === "true") {
      const size = BigInt(section.dataset.size);
      return (Number(h % size) + 0.5) / Number(size);
    }
    return Number(h >> 11n) / 2 ** 53;
  }

  function mark(section, hash) {
    const marker = section.querySelector(".marker");
    if (!marker) return;
    if (hash === null) { marker.setAttribute("visibility", "hidden"); return; }
    const f = position(section, hash);
    if (section.dataset.strip === "true") {
      marker.setAttribute("transform", "translate(" + (f * 600).toFixed(3) + " 0)");
    } else {
      marker.setAttribute("transform", "rotate(" + (f * 360).toFixed(4) + " 120 120)");
    }
    marker.setAttribute("visibility", "visible");
  }

  function clearPick(section) {
    section.querySelectorAll(".picks .pick").forEach((td) => { td.textContent = "–"; });
    section.querySelectorAll("tr.picked, tr.selected").forEach((tr) => tr.classList.remove("picked", "selected"));
    const hashEl = section.querySelector(".pick-hash");
    if (hashEl) { hashEl.textContent = ""; hashEl.title = ""; }
    mark(section, null);
    delete section.dataset.pickedKey;
    delete section.dataset.picked;
  }

  async function pickOne(section, k, kind, seq) {
    const q = new URLSearchParams({ cluster: section.dataset.cluster, key: k, client: kind, explain: "1" });
    const resp = await fetch("/debug/pick?" + q, { cache: "no-store" });
    const body = await resp.json();
    if (seq !== pickSeq) return; // a newer key or refresh superseded this answer
    clearPick(section);
    if (!resp.ok) {
      const hashEl = section.querySelector(".pick-hash");
      if (hashEl) hashEl.textContent = body.error || ("HTTP " + resp.status);
      return;
    }
    for (const [kindName, ep] of Object.entries(body.by_client || {})) {
      const row = section.querySelector('.picks tr[data-kind="' + CSS.escape(kindName) + '"]');
      if (!row) continue;
      row.querySelector(".pick").textContent = ep;
      row.classList.toggle("selected", kindName === body.client);
    }
    section.querySelectorAll(".endpoints tbody tr").forEach((tr) => {
      tr.classList.toggle("picked", tr.dataset.endpoint === body.endpoint);
    });
    const hashEl = section.querySelector(".pick-hash");
    const why = body.explain && body.explain[body.client];
    hashEl.textContent = "hash " + body.hash + " → " + body.endpoint + " (" + body.policy + ", as " + body.client + ")" +
      (why ? ", " + (why.policy === "maglev" ? "slot " : "entry ") + why.entry.index + " of " + why.size : "");
    hashEl.title = why ? why.why : "";
    mark(section, body.hash);
    section.dataset.picked = body.endpoint;
    section.dataset.pickedKey = k;
  }

  async function showKey() {
    const seq = ++pickSeq;
    const k = key();
    const sections = clustersEl.querySelectorAll("section.cluster");
    if (k === "") { sections.forEach(clearPick); return; }
    await Promise.all(Array.from(sections, (s) => pickOne(s, k, client(), seq).catch((err) => {
      if (seq === pickSeq) s.querySelector(".pick-hash").textContent = "pick failed: " + err;
    })));
  }

  async function refreshClusters(force) {
    const headers = {};
    if (etag && !force) headers["If-None-Match"] = etag;
    const resp = await fetch("/debug/page/clusters?client=" + encodeURIComponent(client()), { cache: "no-store", headers });
    if (resp.status === 304) return;
    if (!resp.ok) throw new Error("clusters: HTTP " + resp.status);
    const html = await resp.text(); // rendered and escaped by the server's html/template
    etag = resp.headers.get("ETag");
    clustersEl.innerHTML = html;
    await showKey();
  }

  async function refreshClients() {
    const resp = await fetch("/debug/page/clients", { cache: "no-store" });
    if (!resp.ok) throw new Error("clients: HTTP " + resp.status);
    clientsEl.innerHTML = await resp.text(); // server-rendered, escaped
  }

  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    try {
      await Promise.all([refreshClusters(false), refreshClients()]);
      refreshEl.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (err) {
      refreshEl.textContent = "refresh failed: " + err.message;
    } finally {
      refreshing = false;
    }
  }

  let typing = null;
  keyInput.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { remember(); showKey(); }, 120);
  });
  clientSelect.addEventListener("change", () => {
    remember();
    refreshClusters(true).catch((err) => { refreshEl.textContent = "refresh failed: " + err.message; });
  });
  document.getElementById("controls").addEventListener("submit", (ev) => { ev.preventDefault(); remember(); showKey(); });

  // The page was rendered with the clusters of the current snapshot; learn
  // its ETag on the first refresh instead of redrawing now.
  document.body.dataset.ready = "true";
  showKey();
  setInterval(refresh, refreshEvery);
})();
