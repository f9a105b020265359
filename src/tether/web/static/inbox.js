// The inbox's progressive enhancement: expiry countdowns and live rows. The pages work
// without it. Served as a file (the Content-Security-Policy allows no inline script), and it
// only ever writes text or HTML the server rendered and escaped.
"use strict";

function left(seconds) {
  if (seconds <= 0) return "expired";
  const m = Math.floor(seconds / 60), s = Math.floor(seconds % 60);
  if (m >= 60) return "in " + Math.floor(m / 60) + "h " + (m % 60) + "m";
  return "in " + (m > 0 ? m + "m " : "") + s + "s";
}

function tick() {
  const now = Date.now() / 1000;
  for (const el of document.querySelectorAll("[data-expires]")) {
    const remaining = Number(el.dataset.expires) - now;
    el.textContent = left(remaining);
    el.classList.toggle("soon", remaining > 0 && remaining < 120);
    if (remaining <= 0) {
      // Past its expiry the server refuses a decision anyway; say so before anyone tries.
      for (const section of document.querySelectorAll("[data-decide]")) {
        section.hidden = true;
      }
      const status = document.getElementById("status");
      if (status && status.textContent === "pending") status.textContent = "expired";
    }
  }
}

function live(tbody) {
  if (!window.EventSource) return;
  const source = new EventSource(tbody.dataset.live);
  source.addEventListener("inbox", async () => {
    const response = await fetch(tbody.dataset.fragment, { credentials: "same-origin" });
    if (!response.ok) return;
    tbody.innerHTML = await response.text(); // rendered and escaped by the server
    const count = document.getElementById("inbox-count");
    if (count) count.textContent = String(tbody.querySelectorAll("tr[data-approval]").length);
    tick();
  });
  source.addEventListener("signed-out", () => {
    source.close();
    window.location.reload(); // shows the sign-in page
  });
}

// Tell the approver before the session ends: at its absolute end (a live inbox's heartbeat
// keeps the idle end away), or its idle end on a page that is not live.
function sessionWarning(live) {
  const body = document.body;
  if (!body.dataset.sessionEnds) return;
  const loaded = Date.now() / 1000;
  const idleEnd = loaded + Number(body.dataset.idle || 0);
  const hardEnd = Number(body.dataset.sessionEnds);
  const warning = document.getElementById("session-warning");
  setInterval(() => {
    const end = live ? hardEnd : Math.min(hardEnd, idleEnd);
    const left = end - Date.now() / 1000;
    if (left < 300 && warning) {
      warning.hidden = false;
      warning.textContent = left > 0
        ? "Your session ends " + left_in(left) + "; reload or use the inbox to keep it, or sign in again after."
        : "Your session has ended: sign in again.";
    }
  }, 1000);
}

function left_in(seconds) {
  return seconds > 60 ? "in " + Math.ceil(seconds / 60) + " minutes" : "in " + Math.ceil(seconds) + " seconds";
}

// Keyboard: j/k move through the inbox's rows, o or Enter opens one; on an approval a
// approves, d denies (to the reason), n/p go to the next/previous approval. Never while
// typing in a field.
function keys() {
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target && (target.closest("input, textarea, select") || target.isContentEditable)) return;
    const rows = Array.from(document.querySelectorAll("#inbox-rows tr[data-approval]"));
    const current = rows.findIndex((r) => r.classList.contains("selected"));
    const select = (i) => {
      rows.forEach((r) => r.classList.remove("selected"));
      const row = rows[Math.max(0, Math.min(rows.length - 1, i))];
      row.classList.add("selected");
      row.focus();
    };
    const go = (id) => { const a = document.getElementById(id); if (a) a.click(); };
    if (rows.length && (event.key === "j" || event.key === "k")) {
      select(current < 0 ? 0 : current + (event.key === "j" ? 1 : -1));
    } else if (rows.length && (event.key === "o" || event.key === "Enter") && current >= 0) {
      window.location.href = rows[current].dataset.href;
    } else if (event.key === "a" && document.getElementById("approve")) {
      const confirm = document.getElementById("confirm");
      if (confirm) confirm.focus(); else go("approve");
    } else if (event.key === "d" && document.getElementById("reason")) {
      document.getElementById("reason").focus();
    } else if (event.key === "n") {
      go("next");
    } else if (event.key === "p") {
      go("previous");
    } else {
      return;
    }
    event.preventDefault();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  tick();
  setInterval(tick, 1000);
  const tbody = document.getElementById("inbox-rows");
  if (tbody) live(tbody);
  sessionWarning(Boolean(tbody));
  keys();
});
