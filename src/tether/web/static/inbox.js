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

document.addEventListener("DOMContentLoaded", () => {
  tick();
  setInterval(tick, 1000);
  const tbody = document.getElementById("inbox-rows");
  if (tbody) live(tbody);
});
