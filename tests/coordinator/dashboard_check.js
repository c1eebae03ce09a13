// Loads the dashboard in jsdom against a live server (argv: base URL, admin token),
// prints what it shows, rejects the first held intent, and prints the live events.
// Run by tests/coordinator/test_dashboard.py when node can require jsdom.
const { JSDOM } = require("jsdom");
const base = process.argv[2], token = process.argv[3];
(async () => {
  const html = await (await fetch(base + "/")).text();
  const dom = new JSDOM(html, {
    url: base + "/", runScripts: "dangerously", pretendToBeVisual: true,
    beforeParse(window) {
      window.fetch = (p, o) => fetch(new URL(p, base), o);
      window.WebSocket = WebSocket;
      window.sessionStorage.setItem("corral-admin-token", token);
      window.prompt = () => "not now";
    },
  });
  const doc = dom.window.document;
  const wait = (ms) => new Promise((r) => setTimeout(r, ms));
  await wait(1500);
  const text = (id) => doc.getElementById(id).textContent;
  console.log(JSON.stringify({
    status: text("status"), snapshot: text("snapshot"),
    scopes: [...doc.querySelectorAll("#scopes tr")].map((r) => r.cells[0].textContent),
    gate: [...doc.querySelectorAll("#gate tr")].map((r) => r.cells[0].textContent),
    log: [...doc.querySelectorAll("#log tr")].length,
  }));
  // click reject on the first held intent, then wait for live events
  const reject = [...doc.querySelectorAll("#gate button")].find((b) => b.textContent === "reject");
  if (reject) reject.click();
  await wait(2500);
  console.log(JSON.stringify({
    gate_after: [...doc.querySelectorAll("#gate tr")].length,
    events: [...doc.querySelectorAll("#stream tr")].map((r) => [...r.cells].map((c) => c.textContent).join(" | ")).slice(0, 6),
  }));
  dom.window.close();
  process.exit(0);
})();
