// The dashboard's router: each "#/..." page is a function that fills <main> and may ask to
// be refreshed; leaving the page stops its refreshes.

import { dagPage } from "./dag_page.js";
import { deadLettersPage } from "./dead_letters.js";
import { h, put } from "./dom.js";
import { jobPage, jobsPage } from "./jobs.js";
import { livePage, overviewPage, partitionsPage } from "./live.js";

const ROUTES = [
  [/^#?\/?$/, overviewPage, "overview"],
  [/^#\/jobs$/, jobsPage, "jobs"],
  [/^#\/job\/(.+)$/, jobPage, "jobs"],
  [/^#\/dead-letters$/, deadLettersPage, "dead-letters"],
  [/^#\/live$/, livePage, "live"],
  [/^#\/partitions$/, partitionsPage, "partitions"],
  [/^#\/dag(?:\/([^/]+)(?:\/(\d+))?)?$/, dagPage, "dag"],
];

let timers = [];

/** What a page gets: where to draw, and ``every(ms, fn)`` to refresh while it is shown. */
function pageContext(main) {
  return {
    main,
    every(ms, fn) {
      const run = async () => {
        if (document.hidden) return;
        await fn();
      };
      timers.push(setInterval(run, ms));
    },
  };
}

async function route() {
  for (const timer of timers) clearInterval(timer);
  timers = [];
  const [path] = location.hash.split("?");
  const main = document.getElementById("main");
  for (const [pattern, page, tab] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    for (const link of document.querySelectorAll("nav a")) {
      link.classList.toggle("active", link.dataset.tab === tab);
    }
    put(main);
    const args = match.slice(1).map((part) => (part === undefined ? undefined : decodeURIComponent(part)));
    await page(pageContext(main), ...args);
    return;
  }
  put(main, h("p", {}, "No such page. ", h("a", { href: "#/" }, "Overview")));
}

window.addEventListener("hashchange", route);
route();
