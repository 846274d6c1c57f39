// taskstate state pages: a client of the HTTP API (docs/api.md). No framework, no build step.
//
// The page's address says what to show (relative links, so any mount prefix works):
//   (nothing)                                  DAGs and assets holding state
//   ?dag_id=D                                  runs of D holding state
//   ?dag_id=D&run_id=R                         task instances of R holding state
//   ?dag_id=D&run_id=R&task_id=T[&map_index=N|all]   the task instance's state
//   ?asset=NAME                                an asset's state (NAME: its name, else its uri)
//
// Credentials: the host's cookie (Airflow 3.1+ `_token`, Airflow 2 session) goes with every
// request; Airflow 3.0's UI keeps its token in localStorage instead (same origin, so readable
// here); a taskstate token pasted into the sign-in box is kept for this browser tab only.
"use strict";
(() => {
  const root = document.getElementById("ts-app");
  if (!root) return;
  const cfg = root.dataset;
  const API = new URL(cfg.api, location.href);
  const UI = new URL(cfg.ui, location.href);
  const PAGE_SIZE = 25;
  const FOLD_CHARS = 240;
  const TOKEN_KEY = "taskstate.token";
  const ZONE_KEY = "taskstate.zone"; // "utc" (default, as Airflow) or "local"
  const params = new URLSearchParams(location.search);
  let airflowToken = null;

  class AuthError extends Error {}

  // A refusal or failure the server answered; `status` lets a view word a 403 itself.
  class HttpError extends Error {
    constructor(text, status) { super(text); this.status = status; }
  }

  // -- HTTP --------------------------------------------------------------------------------

  function keyPath(key) {
    // One path segment; `.` and `..` spelled out so no client removes them (docs/api.md).
    if (key === "." || key === "..") return key.replace(/\./g, "%2E");
    return encodeURIComponent(key);
  }

  async function call(method, path, { query = {}, body, headers = {}, base = API, cache } = {}) {
    const url = new URL(path, base);
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
    }
    const sent = { Accept: "application/json", ...headers };
    if (body !== undefined) sent["Content-Type"] = "application/json";
    if (cfg.csrf && method !== "GET") sent["X-CSRFToken"] = cfg.csrf;
    if (method !== "GET") sent["X-Taskstate-Via"] = "ui"; // recorded as {"kind":"api","via":"ui",...}
    const token = sessionStorage.getItem(TOKEN_KEY) || airflowToken;
    if (token) sent.Authorization = `Bearer ${token}`;
    const response = await fetch(url, {
      method, headers: sent, credentials: "same-origin", cache,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      const stored = localStorage.getItem("token"); // Airflow 3.0's UI keeps its JWT here
      if (!token && stored) {
        airflowToken = stored;
        return call(method, path, { query, body, headers, base, cache });
      }
      throw new AuthError(await message(response));
    }
    return response;
  }

  async function message(response) {
    let detail;
    try { detail = (await response.json()).detail; } catch { detail = undefined; }
    if (Array.isArray(detail)) return detail.map((d) => d.msg || JSON.stringify(d)).join("\n");
    if (typeof detail === "string") return detail;
    return `${response.status} ${response.statusText}`;
  }

  async function getJson(path, query) {
    const response = await call("GET", path, { query });
    if (!response.ok) throw new HttpError(await message(response), response.status);
    return response.json();
  }

  // -- writes that never overwrite unseen changes -------------------------------------------

  const KEPT = { kept: true }; // the person kept a newer value instead of writing theirs
  const NO_VERSION = '"not-the-current-version"'; // an If-Match no ETag matches

  // The key as the server holds it now, with its ETag (listings carry none); null if absent.
  async function current(path, query) {
    const response = await call("GET", path, { query, cache: "no-store" });
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(await message(response));
    return { entry: await response.json(), etag: response.headers.get("ETag") };
  }

  // The ETag of the version the page shows; if the key moved on since the page read it, a tag
  // that matches nothing, so the write answers 412 and the person sees the newer value.
  async function versionOf(path, query, shown) {
    const now = await current(path, query);
    const same = now && now.entry.updated_at === shown.updated_at
      && JSON.stringify(now.entry.value) === JSON.stringify(shown.value);
    return same ? now.etag : NO_VERSION;
  }

  // Send `send(tag)` (tag null: the key is gone) until it is not refused with 412; on each 412
  // show the newer value and let the person choose. Resolves null when written, KEPT when they
  // kept the newer value, else the server's message.
  async function guarded(path, query, key, tag, send, mine) {
    for (;;) {
      const response = await send(tag);
      if (response.status !== 412) return response.ok ? null : message(response);
      const now = await current(path, query);
      if (!now && mine === "Delete anyway") return null; // someone deleted it already
      if (!(await conflictDialog(key, now && now.entry, mine))) return KEPT;
      tag = now ? now.etag : null;
    }
  }

  async function allowed(method, query) {
    try {
      const response = await call(method, "access", { query, base: UI });
      return response.ok && (await response.json()).allowed === true;
    } catch (error) {
      if (error instanceof AuthError) throw error;
      return false;
    }
  }

  // -- theme -------------------------------------------------------------------------------

  // Dark or light (`ts-dark` on the body): Airflow 3's own choice when the page is its tab or
  // nav iframe (its theme library puts `dark` or `light` on the top page's <html>, which this
  // same-origin frame may read; its switch is followed as it flips), else the system's
  // (prefers-color-scheme). Not inside Airflow 2's page, which is light and not ours to style.
  function followTheme() {
    if (!document.body.classList.contains("ts-standalone")) return;
    const system = matchMedia("(prefers-color-scheme: dark)");
    let host = null;
    try {
      if (window.parent !== window) host = window.parent.document.documentElement;
    } catch { host = null; } // framed by another origin: its page is not readable
    const apply = () => {
      const chosen = host && ["dark", "light"].find((name) => host.classList.contains(name));
      document.body.classList.toggle("ts-dark", (chosen || (system.matches ? "dark" : "light")) === "dark");
    };
    apply();
    system.addEventListener("change", apply);
    if (host) new MutationObserver(apply).observe(host, { attributes: true, attributeFilter: ["class"] });
  }

  // -- DOM helpers -------------------------------------------------------------------------

  function h(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "text") node.textContent = value;
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function href(query) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null) search.set(name, value);
    }
    const text = search.toString();
    return text ? `?${text}` : location.pathname;
  }

  const local = () => localStorage.getItem(ZONE_KEY) === "local";

  // "2026-12-01 16:20:13 UTC" by default; the browser's zone, labelled, when the person picks it.
  function timeText(iso) {
    const date = new Date(iso);
    if (!local()) return `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
    return date.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  }

  function when(iso) {
    if (!iso) return "Never";
    return h("time", { datetime: iso, title: iso }, timeText(iso));
  }

  function writer(by) {
    if (!by) return h("span", { class: "ts-empty" }, "unknown");
    if (by.kind === "task") {
      const index = by.map_index !== null && by.map_index >= 0 ? ` [${by.map_index}]` : "";
      // The try that wrote (absent on plain-Python writes and older rows), as describe() says.
      const tried = by.try_number != null ? `, try ${by.try_number}` : "";
      return `task ${by.dag_id}.${by.task_id}${index}, run ${by.run_id}${tried}`;
    }
    // As taskstate.writers.describe() words it: "ui: alice", "cli: bob", "api: ops".
    const who = by.user || by.subject || by.dag_id;
    const label = by.via || by.kind;
    return who ? `${label}: ${who}` : label;
  }

  function valueCell(value) {
    const text = JSON.stringify(value, null, 2);
    if (text.length <= FOLD_CHARS && text.split("\n").length <= 8) return h("pre", {}, text);
    const preview = JSON.stringify(value).slice(0, 80);
    return h("details", {},
      h("summary", {}, `${preview}… (${text.length} characters)`),
      h("pre", {}, text));
  }

  const status = h("p", { class: "ts-status", role: "status", "aria-live": "polite" });
  const alertBox = h("p", { class: "ts-error", role: "alert" });

  // What every view has on top: jump to a DAG / run / task, the time zone, the token.
  function topBar() {
    const target = h("input", { id: "ts-goto", type: "search", name: "goto", autocomplete: "off", placeholder: "etl  or  etl run1 load", "aria-describedby": "ts-goto-help" });
    const go = h("form", { class: "ts-goto", role: "search", onsubmit: (event) => {
      event.preventDefault();
      // Airflow's DAG, run and task ids hold no spaces: "DAG [RUN [TASK]]".
      const [dagId, runId, taskId] = target.value.trim().split(/\s+/);
      if (dagId) location.search = href({ dag_id: dagId, run_id: runId, task_id: taskId });
    } },
    h("label", { for: "ts-goto" }, "Go to DAG, run or task", target),
    h("span", { id: "ts-goto-help", class: "ts-visually-hidden" }, "A DAG id, optionally followed by a run id and a task id, separated by spaces"),
    h("button", { type: "submit" }, "Go"));
    const zone = h("select", { id: "ts-zone", onchange: (event) => { localStorage.setItem(ZONE_KEY, event.target.value); location.reload(); } },
      h("option", { value: "utc", selected: !local() }, "UTC"),
      h("option", { value: "local", selected: local() }, `Local (${Intl.DateTimeFormat().resolvedOptions().timeZone})`));
    const signOut = sessionStorage.getItem(TOKEN_KEY)
      ? h("button", { type: "button", onclick: () => { sessionStorage.removeItem(TOKEN_KEY); showLogin("Signed out: this tab forgot the token. Paste another one to go on."); } }, "Use another token")
      : null;
    return h("div", { class: "ts-topbar" }, go, h("span", { class: "ts-spacer" }), h("label", { for: "ts-zone" }, "Times", zone), signOut);
  }

  // Replace the page's content; absent parts (null, false) are left out.
  function show(...parts) {
    root.replaceChildren(topBar(), ...parts.filter((part) => part !== null && part !== undefined && part !== false));
  }

  function say(text) { status.textContent = text; alertBox.textContent = ""; }
  function fail(text) { alertBox.textContent = text; status.textContent = ""; }

  function crumbs(items) {
    return h("nav", { class: "ts-crumbs", "aria-label": "Breadcrumb" },
      h("ol", {}, items.map(([label, link], i) => h("li", {},
        i === items.length - 1 ? h("span", { "aria-current": "page" }, label) : h("a", { href: link }, label)))));
  }

  // `exact` false (a listing's `exact_total`): more entries follow and `total` is only a lower
  // bound — the server did not count them all, so the page costs what it shows.
  function pager(total, offset, onMove, exact = true) {
    if (exact && total <= PAGE_SIZE && offset === 0) return h("div", { class: "ts-pager" }, `${total} ${total === 1 ? "entry" : "entries"}`);
    const last = Math.min(offset + PAGE_SIZE, total);
    return h("nav", { class: "ts-pager", "aria-label": "Pages" },
      h("button", { type: "button", disabled: offset === 0, onclick: () => onMove(Math.max(0, offset - PAGE_SIZE)) }, "Previous"),
      h("span", {}, exact ? `${total ? offset + 1 : 0}–${last} of ${total}` : `${offset + 1}–${last} of more than ${last}`),
      h("button", { type: "button", disabled: last >= total, onclick: () => onMove(offset + PAGE_SIZE) }, "Next"));
  }

  function table(caption, columns, rows, { stack = true } = {}) {
    return h("table", { class: stack ? "ts-stack" : "" },
      h("caption", { class: "ts-visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell, i) => {
        const td = h("td", { "data-label": columns[i] });
        if (cell && cell.className !== undefined && cell.cell) { td.className = cell.className; td.append(cell.cell); }
        else td.append(cell instanceof Node ? cell : document.createTextNode(String(cell)));
        return td;
      })))));
  }

  const cell = (className, content) => ({ className, cell: content instanceof Node ? content : document.createTextNode(String(content)) });

  // -- dialogs -----------------------------------------------------------------------------

  function confirmDialog(title, text, action) {
    return new Promise((resolve) => {
      const dialog = h("dialog", { role: "alertdialog", "aria-labelledby": "ts-confirm-title", "aria-describedby": "ts-confirm-text" },
        h("h2", { id: "ts-confirm-title" }, title),
        h("p", { id: "ts-confirm-text" }, text),
        h("div", { class: "ts-buttons" },
          h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel"),
          h("button", { type: "button", class: "ts-danger", onclick: () => dialog.close("ok") }, action)));
      dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "ok"); });
      root.append(dialog);
      dialog.showModal();
      dialog.querySelector("button").focus(); // Cancel first: Enter never destroys by accident
    });
  }

  // The key changed (or went) since the person read it: show what it holds now. Resolves true
  // when they choose `mine` (write theirs over it), false to keep the newer one.
  function conflictDialog(key, newer, mine) {
    return new Promise((resolve) => {
      const dialog = h("dialog", { role: "alertdialog", "aria-labelledby": "ts-conflict-title", "aria-describedby": "ts-conflict-text" },
        h("h2", { id: "ts-conflict-title" }, `"${key}" changed since you read it`),
        newer
          ? [h("p", { id: "ts-conflict-text" }, "It now holds this value, written by ", writer(newer.last_updated_by), " at ", when(newer.updated_at), ":"),
            valueCell(newer.value)]
          : h("p", { id: "ts-conflict-text" }, "Someone deleted it."),
        h("div", { class: "ts-buttons" },
          h("button", { type: "button", onclick: () => dialog.close("keep") }, newer ? "Keep the newer value" : "Keep it deleted"),
          h("button", { type: "button", class: "ts-danger", onclick: () => dialog.close("mine") }, mine)));
      dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "mine"); });
      root.append(dialog);
      dialog.showModal();
      dialog.querySelector("button").focus(); // keeping theirs is the safe default
    });
  }

  // Add or edit one value. `entry` is null to add. `save(key, value, expiry)` returns null on
  // success, KEPT when the person kept a newer value, or the server's message, shown inline;
  // expiry: "keep" | "default" | "never" | days. Resolves "saved", "kept" or "".
  function editorDialog({ title, entry, expiry, save }) {
    return new Promise((resolve) => {
      const error = h("p", { class: "ts-error", id: "ts-editor-error", role: "alert" });
      const keyInput = h("input", { id: "ts-editor-key", name: "key", required: true, autocomplete: "off", readonly: entry ? true : null, value: entry ? entry.key : "" });
      const valueInput = h("textarea", { id: "ts-editor-value", name: "value", spellcheck: "false", "aria-describedby": "ts-editor-help ts-editor-error" });
      valueInput.value = entry ? JSON.stringify(entry.value, null, 2) : "";
      const days = h("input", { type: "number", min: "1", step: "1", name: "days", id: "ts-editor-days", value: "7", "aria-label": "Days to keep", style: "width: 6rem" });
      let retention = null;
      if (expiry) {
        const option = (value, label, checked, extra) => h("label", {},
          h("input", { type: "radio", name: "expiry", value, checked }), label, extra || null);
        retention = h("fieldset", {},
          h("legend", {}, "Expiry"),
          entry ? option("keep", entry.expires_at ? `Keep (${timeText(entry.expires_at)})` : "Keep (never expires)", true) : null,
          option("default", "Default retention", !entry),
          option("never", "Never expires", false),
          option("days", "Expires in", false, h("span", {}, days, " days")));
      }
      const submit = h("button", { type: "submit", class: "ts-primary" }, "Save");
      const form = h("form", { method: "dialog", novalidate: true },
        h("h2", { id: "ts-editor-title" }, title),
        h("div", { class: "ts-field" }, h("label", { for: "ts-editor-key" }, "Key", keyInput)),
        h("div", { class: "ts-field" }, h("label", { for: "ts-editor-value" }, "Value (JSON)", valueInput)),
        h("p", { id: "ts-editor-help", class: "ts-meta" }, "Any JSON value except null, e.g. {\"offset\": 42}, \"text\", 3, [1, 2]."),
        retention, error,
        h("div", { class: "ts-buttons" },
          h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel"), submit));
      const dialog = h("dialog", { "aria-labelledby": "ts-editor-title" }, form);
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        error.textContent = "";
        const key = keyInput.value;
        if (!key) { error.textContent = "Enter a key."; keyInput.focus(); return; }
        let value;
        try { value = JSON.parse(valueInput.value); } catch (exc) {
          error.textContent = `The value is not valid JSON: ${exc.message}`;
          valueInput.setAttribute("aria-invalid", "true"); valueInput.focus(); return;
        }
        if (value === null) {
          error.textContent = "null cannot be stored: delete the key instead.";
          valueInput.setAttribute("aria-invalid", "true"); valueInput.focus(); return;
        }
        valueInput.removeAttribute("aria-invalid");
        let choice = "keep";
        if (retention) {
          choice = form.elements.expiry.value;
          if (choice === "days") {
            const n = Number(days.value);
            if (!Number.isInteger(n) || n < 1) { error.textContent = "Days must be a whole number, at least 1."; days.focus(); return; }
            choice = n;
          }
        }
        submit.disabled = true;
        const problem = await save(key, value, choice);
        submit.disabled = false;
        if (problem === KEPT) { dialog.close("kept"); return; }
        if (problem) { error.textContent = problem; valueInput.focus(); return; }
        dialog.close("saved");
      });
      dialog.addEventListener("close", () => { dialog.remove(); resolve(["saved", "kept"].includes(dialog.returnValue) ? dialog.returnValue : ""); });
      root.append(dialog);
      dialog.showModal();
      (entry ? valueInput : keyInput).focus();
    });
  }

  // -- history (docs/history.md) ------------------------------------------------------------

  // -- diff of two versions -------------------------------------------------------------

  // A value as lines for a diff: JSON, two-space indented, object keys sorted (so a reordered
  // object reads as unchanged); a deletion is one line saying so.
  function diffLines(value) {
    if (value === null) return ["(deleted: no value)"];
    const sorted = (v) => {
      if (Array.isArray(v)) return v.map(sorted);
      if (v && typeof v === "object") return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]));
      return v;
    };
    return JSON.stringify(sorted(value), null, 2).split("\n");
  }

  // The line diff of `a` into `b`: [kind, line] with kind " " (both), "-" (only in a) or "+"
  // (only in b). Longest common subsequence between the common head and tail; past a million
  // cells (two huge values) the middle is shown as all removed, then all added.
  function lineDiff(a, b) {
    let head = 0;
    while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
    let tail = 0;
    while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
    const x = a.slice(head, a.length - tail);
    const y = b.slice(head, b.length - tail);
    const middle = [];
    if (x.length * y.length > 1e6) {
      middle.push(...x.map((line) => ["-", line]), ...y.map((line) => ["+", line]));
    } else {
      const width = y.length + 1;
      const common = new Uint32Array((x.length + 1) * width);
      for (let i = x.length - 1; i >= 0; i -= 1) {
        for (let j = y.length - 1; j >= 0; j -= 1) {
          common[i * width + j] = x[i] === y[j] ? common[(i + 1) * width + j + 1] + 1
            : Math.max(common[(i + 1) * width + j], common[i * width + j + 1]);
        }
      }
      let i = 0;
      let j = 0;
      while (i < x.length || j < y.length) {
        if (i < x.length && j < y.length && x[i] === y[j]) { middle.push([" ", x[i]]); i += 1; j += 1; }
        // On a tie the removal goes first, so a changed line reads "-" old, then "+" new.
        else if (i < x.length && (j === y.length || common[(i + 1) * width + j] >= common[i * width + j + 1])) { middle.push(["-", x[i]]); i += 1; }
        else { middle.push(["+", y[j]]); j += 1; }
      }
    }
    return [...a.slice(0, head).map((line) => [" ", line]), ...middle, ...a.slice(a.length - tail).map((line) => [" ", line])];
  }

  const CONTEXT = 3; // unchanged lines kept around each change; longer runs fold

  // The diff as text a person reads without colour: each line starts with "-" (removed), "+"
  // (added) or a space, removed lines are <del> and added ones <ins> (read out as such), and
  // long unchanged runs fold into "… N unchanged lines".
  function diffView(older, newer) {
    const lines = lineDiff(diffLines(older.value), diffLines(newer.value));
    const removed = lines.filter(([kind]) => kind === "-").length;
    const added = lines.filter(([kind]) => kind === "+").length;
    const near = lines.map((_, i) => lines.slice(Math.max(0, i - CONTEXT), i + CONTEXT + 1).some(([kind]) => kind !== " "));
    const out = [];
    for (let i = 0; i < lines.length;) {
      if (!near[i]) {
        let j = i;
        while (j < lines.length && !near[j]) j += 1;
        out.push(h("span", { class: "ts-diff-fold" }, `  … ${j - i} unchanged ${j - i === 1 ? "line" : "lines"}\n`));
        i = j;
        continue;
      }
      const [kind, line] = lines[i];
      const text = `${kind} ${line}\n`;
      out.push(kind === "-" ? h("del", {}, text) : kind === "+" ? h("ins", {}, text) : h("span", {}, text));
      i += 1;
    }
    const summary = removed || added
      ? `${removed} ${removed === 1 ? "line" : "lines"} removed (−), ${added} added (+)`
      : "The two values are the same.";
    return [h("p", { class: "ts-meta", id: "ts-diff-summary" }, summary),
      removed || added ? h("pre", { class: "ts-diff", tabindex: "0", "aria-describedby": "ts-diff-summary" }, out) : null];
  }

  // A key's kept versions, newest first: who, when, which operation, the value. Resolves the
  // version the person picked to restore (null: closed). `mayRestore`: a Restore button on each
  // version but the newest (what the key holds now). With two versions or more, a From and a
  // To radio button on each row pick any two to compare; the diff below follows the choice.
  async function historyDialog(key, path, query, mayRestore) {
    const versions = (await getJson(path, query)).versions;
    return new Promise((resolve) => {
      let picked = null;
      const compare = versions.length > 1;
      let from = compare ? 1 : 0;
      let to = 0;
      const diff = h("section", { class: "ts-diff-box", "aria-labelledby": "ts-diff-title" });
      // Announced on each pick, briefly: the whole diff stays readable below it.
      const told = h("p", { class: "ts-visually-hidden", "aria-live": "polite" });
      const showDiff = () => {
        const [older, newer] = [versions[from], versions[to]];
        const title = `Changes from version ${older.version} to version ${newer.version}`;
        const shown = diffView(older, newer);
        diff.replaceChildren(h("h3", { id: "ts-diff-title" }, title), ...shown);
        told.textContent = `${title}: ${shown[0].textContent}`;
      };
      const radio = (name, i, label) => h("input", {
        type: "radio", name, value: String(i), checked: (name === "ts-from" ? from : to) === i, "aria-label": label,
        onchange: () => { if (name === "ts-from") from = i; else to = i; showDiff(); },
      });
      const columns = [...(compare ? ["From", "To"] : []), "Version", "Operation", "Value", "Updated at", "Updated by", ...(mayRestore ? [""] : [])];
      const rows = versions.map((v, i) => [
        ...(compare ? [radio("ts-from", i, `Compare from version ${v.version}`), radio("ts-to", i, `Compare to version ${v.version}`)] : []),
        String(v.version), v.op,
        v.value === null ? h("span", { class: "ts-empty" }, "(deleted)") : valueCell(v.value),
        cell("ts-when", when(v.updated_at)), writer(v.updated_by),
        ...(mayRestore ? [i === 0 ? h("span", { class: "ts-meta" }, "current") : h("button", { type: "button", "aria-label": `Restore version ${v.version}`, onclick: () => { picked = v; dialog.close("restore"); } }, "Restore")] : [])]);
      const dialog = h("dialog", { class: "ts-history", "aria-labelledby": "ts-history-title" },
        h("h2", { id: "ts-history-title" }, `History of ${key}`),
        versions.length
          ? table(`Versions of ${key}, newest first`, columns, rows)
          : h("p", { class: "ts-empty" }, "No versions are kept for this key (history is off, or it was written before history was on)."),
        compare ? [told, diff] : null,
        h("div", { class: "ts-buttons" }, h("button", { type: "button", onclick: () => dialog.close("close") }, "Close")));
      if (compare) showDiff();
      dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "restore" ? picked : null); });
      root.append(dialog);
      dialog.showModal();
    });
  }

  // Show `entry`'s history; restore the version the person picks, behind the same confirmation
  // as an edit and with If-Match on the version the page shows (on 412 the newer value is shown
  // and the person chooses, as for Edit). Resolves what to say, "" when nothing was done.
  async function showHistory(entry, statePath, historyPath, query, mayRestore, what) {
    const picked = await historyDialog(entry.key, historyPath, query, mayRestore);
    if (!picked) return "";
    const tag = await versionOf(statePath, query, entry);
    const ok = await confirmDialog(`Restore "${entry.key}" to version ${picked.version}?`,
      picked.value === null
        ? `Version ${picked.version} is a deletion: ${what} loses the value of "${entry.key}", as a Delete would. The value it holds now stays in its history.`
        : `${what} gets the value of version ${picked.version} back, written as a new version; the value it holds now stays in its history.`,
      "Restore version");
    if (!ok) return "";
    const problem = await guarded(statePath, query, entry.key, tag,
      (version) => call("POST", historyPath, { query, body: { version: picked.version }, headers: version ? { "If-Match": version } : {} }),
      "Restore anyway");
    if (problem === KEPT) return `Kept the newer value of ${entry.key}.`;
    if (problem) throw new Error(problem);
    return `Restored ${entry.key} to version ${picked.version}.`;
  }

  const count = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

  // The words for a refused restore as of: 410 is history that no longer reaches that far.
  function restoreProblem(status_, text) {
    if (status_ === 410) return `The history no longer reaches that instant (older versions were pruned, or history is off): pick a later instant. ${text}`;
    return text;
  }

  // The typed instant as an ISO one, null when it is not one: "2026-12-01 03:00[:00]" (or with
  // a T) in the zone the Times switch shows (UTC unless the person picked the browser's); a
  // trailing " UTC" (as the page writes times, so one can be pasted from the History panel),
  // "Z" or "+02:00" names the zone itself.
  function typedInstant(typed) {
    const found = /^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d(?::\d\d(?:\.\d+)?)?)\s*(UTC|Z|[+-]\d\d:\d\d)?$/i.exec(typed.trim());
    if (!found) return null;
    const [, day, clock, zone] = found;
    const named = zone ? (/^(utc|z)$/i.test(zone) ? "Z" : zone) : local() ? "" : "Z";
    const date = new Date(`${day}T${clock}${named}`); // no zone: the browser's (ECMAScript)
    return Number.isNaN(date.getTime()) ? null : date.toISOString();
  }

  // An instant as the input shows it: "2026-12-01 03:00:00" in the zone the Times switch shows.
  function inputText(date) {
    const shifted = local() ? new Date(date.getTime() - date.getTimezoneOffset() * 60000) : date;
    return shifted.toISOString().slice(0, 19).replace("T", " ");
  }

  // Pick the instant to restore `what` to and preview it. Resolves { instant, preview } when
  // the person asks to restore what the preview shows, null when they close it.
  function restoreAsOfDialog(what, path, query, all) {
    return new Promise((resolve) => {
      const zone = local() ? `local time, ${Intl.DateTimeFormat().resolvedOptions().timeZone}` : "UTC";
      const input = h("input", { id: "ts-as-of", type: "text", inputmode: "numeric", autocomplete: "off", spellcheck: "false", required: true, value: inputText(new Date()), "aria-describedby": "ts-as-of-help", size: "22" });
      const error = h("p", { class: "ts-error", role: "alert" });
      const result = h("div", { class: "ts-preview" });
      const told = h("p", { class: "ts-visually-hidden", "aria-live": "polite" }); // the summary, announced
      const restore = h("button", { type: "button", class: "ts-danger", disabled: true, onclick: () => dialog.close("restore") }, "Restore…");
      let shown = null; // { instant, preview } the result shows
      const stale = () => { shown = null; restore.disabled = true; result.replaceChildren(); told.textContent = ""; };
      input.addEventListener("input", stale);
      const form = h("form", { novalidate: true, onsubmit: async (event) => {
        event.preventDefault();
        stale();
        error.textContent = "";
        const instant = typedInstant(input.value);
        if (!instant) { error.textContent = `Enter a date and a time as YYYY-MM-DD HH:MM:SS (${zone}), e.g. ${inputText(new Date())}.`; input.setAttribute("aria-invalid", "true"); input.focus(); return; }
        input.removeAttribute("aria-invalid");
        if (new Date(instant) > new Date()) { error.textContent = "That instant is in the future: pick one in the past."; input.focus(); return; }
        let preview;
        try {
          const response = await call("GET", path, { query: { ...query, as_of: instant }, cache: "no-store" });
          if (!response.ok) { error.textContent = restoreProblem(response.status, await message(response)); return; }
          preview = await response.json();
        } catch (exc) { error.textContent = exc.message; return; }
        const back = preview.changes.filter((c) => c.then !== null && c.now === null);
        const changed = preview.changes.filter((c) => c.then !== null && c.now !== null && !same(c.then, c.now));
        const gone = preview.changes.filter((c) => c.then === null);
        const kept = preview.restored - back.length - changed.length;
        const happens = (c) => (c.then === null ? "deleted (created since)" : c.now === null ? "comes back" : same(c.then, c.now) ? "unchanged" : "changed back");
        const shownValue = (v) => (v === null ? h("span", { class: "ts-empty" }, "(none)") : valueCell(v));
        const heading = `As of ${timeText(instant)}: ${count(back.length, "key")} come${back.length === 1 ? "s" : ""} back, ${count(changed.length, "key")} change${changed.length === 1 ? "s" : ""} back, ${count(gone.length, "key")} ${gone.length === 1 ? "is" : "are"} deleted, ${kept} unchanged.`;
        result.replaceChildren(
          h("p", { id: "ts-preview-summary" }, heading),
          preview.changes.length
            ? table(`What restoring as of ${timeText(instant)} changes`, [...(all ? ["Map index"] : []), "Key", "What happens", "Value now", "Value then"],
              preview.changes.map((c) => [...(all ? [c.map_index] : []), cell("ts-key", c.key), happens(c), shownValue(c.now), shownValue(c.then)]))
            : h("p", { class: "ts-empty" }, "It held no state then, and holds none now that history knows of: nothing to restore."));
        told.textContent = heading;
        shown = { instant, preview };
        restore.disabled = !(back.length || changed.length || gone.length);
        if (!restore.disabled) restore.focus();
      } },
      h("h2", { id: "ts-as-of-title" }, `Restore state as of…`),
      h("p", { id: "ts-as-of-text" }, `Every key of ${what} gets back the value it held at the instant you pick, and keys created since are deleted: the undo of a clear. Nothing is written until you confirm.`),
      h("div", { class: "ts-toolbar" },
        h("label", { for: "ts-as-of" }, `Instant (${zone})`, input),
        h("button", { type: "submit", class: "ts-primary" }, "Preview")),
      h("p", { id: "ts-as-of-help", class: "ts-meta" }, `YYYY-MM-DD HH:MM:SS in ${zone} (the Times switch on top changes it; a time ending in UTC, Z or +02:00 says its own zone). A time from the History panel can be pasted.`),
      error, told, result,
      h("div", { class: "ts-buttons" },
        h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel"), restore));
      const dialog = h("dialog", { class: "ts-history", "aria-labelledby": "ts-as-of-title", "aria-describedby": "ts-as-of-text" }, form);
      dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "restore" ? shown : null); });
      root.append(dialog);
      dialog.showModal();
      input.focus();
    });
  }

  // -- views -------------------------------------------------------------------------------

  function showLogin(text) {
    const input = h("input", { id: "ts-token", type: "password", autocomplete: "off", name: "token" });
    const parts = [h("h1", {}, "Sign in to see state"), h("p", { class: "ts-error", role: "alert" }, text)];
    if (cfg.login) {
      const inFrame = window.self !== window.top;
      parts.push(inFrame
        // Airflow's sandboxed iframe allows neither popups nor navigating the top page.
        ? h("p", {}, "Your Airflow session has ended or does not reach this tab: reload the Airflow page to sign in again, or open ",
          h("code", {}, location.href), " on its own.")
        : h("p", {}, h("a", { href: `${new URL(cfg.login, location.href)}?next=${encodeURIComponent(location.href)}` }, "Sign in to Airflow"), ", then come back."));
    }
    parts.push(h("form", { class: "ts-login", onsubmit: (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      location.reload();
    } },
    h("label", { for: "ts-token" }, "taskstate token (taskstate token create)", input), " ",
    h("button", { type: "submit", class: "ts-primary" }, "Use token")));
    show(...parts);
  }

  // Discovery counts stop past 10,000 keys (the API answers 10001): shown as "10000+".
  const keyCount = (n) => (n > 10000 ? "10000+" : n);

  // The search box finds the text as typed, any case: LIKE's wildcards are escaped for the
  // server's `dag_id_pattern` (the server searches and answers one page); `|`, Airflow's "or",
  // becomes `_` (any one character: no Airflow DAG id holds a `|`).
  const literal = (text) => text.replace(/[\\%_|]/g, (c) => (c === "|" ? "_" : `\\${c}`));

  async function homeView() {
    const offset = Number(params.get("offset") || 0);
    const search = (params.get("q") || "").trim();
    const [dags, assets] = await Promise.all([
      getJson("dags", { limit: PAGE_SIZE, offset, dag_id_pattern: search ? literal(search) : undefined }),
      getJson("assets", { limit: 100 }),
    ]);
    const dagRows = dags.dags.map((d) => [h("a", { href: href({ dag_id: d.dag_id }) }, d.dag_id), keyCount(d.keys)]);
    const assetRows = assets.assets.map((a) => [h("a", { href: href({ asset: a.name }) }, a.name), keyCount(a.keys)]);
    const box = h("input", { id: "ts-search", type: "search", name: "q", value: search, autocomplete: "off" });
    show(
      h("h1", {}, "State"), status, alertBox,
      h("h2", { id: "ts-dags" }, "DAGs with task state"),
      h("form", { class: "ts-toolbar", role: "search", onsubmit: (event) => { event.preventDefault(); location.search = href({ q: box.value.trim() || undefined }); } },
        h("label", { for: "ts-search" }, "Search DAGs (part of the id)", box), h("button", { type: "submit" }, "Search")),
      dagRows.length ? table("DAGs with task state", ["DAG", "Keys"], dagRows)
        : h("p", { class: "ts-empty" }, search ? `No DAG you may see has "${search}" in its id.` : "No task state yet."),
      search ? h("p", { class: "ts-meta" }, dags.exact_total === false ? `More than ${dags.total_entries - 1} DAGs match`
        : `${dags.total_entries} ${dags.total_entries === 1 ? "DAG matches" : "DAGs match"}`) : null,
      pager(dags.total_entries, offset, (o) => { location.search = href({ q: search || undefined, offset: o }); }, dags.exact_total !== false),
      h("h2", { id: "ts-assets" }, "Assets with state"),
      assetRows.length ? table("Assets with state", ["Asset", "Keys"], assetRows) : h("p", { class: "ts-empty" }, "No asset state yet."));
  }

  async function assetsView() {
    const offset = Number(params.get("offset") || 0);
    const assets = await getJson("assets", { limit: PAGE_SIZE, offset });
    const rows = assets.assets.map((a) => [h("a", { href: href({ asset: a.name }) }, a.name), keyCount(a.keys)]);
    show(
      crumbs([["State", href({})], ["Assets"]]),
      h("h1", {}, "Assets with state"), status, alertBox,
      rows.length ? table("Assets with state", ["Asset", "Keys"], rows) : h("p", { class: "ts-empty" }, "No asset state yet."),
      pager(assets.total_entries, offset, (o) => { location.search = href({ view: "assets", offset: o }); }, assets.exact_total !== false));
  }

  // What `reading` resolves to, or null when the server refused it (403: the caller may see
  // nothing of this DAG or run), after showing why under `heading` instead.
  async function refused(reading, trail, heading, what) {
    try {
      return await reading;
    } catch (error) {
      if (!(error instanceof HttpError) || error.status !== 403) throw error;
      show(crumbs(trail), h("h1", {}, heading),
        h("p", { class: "ts-error", role: "alert" }, `You may not see ${what}: your token or role does not cover it. Ask for one that names it, or use another token.`),
        h("p", { class: "ts-meta" }, error.message));
      return null;
    }
  }

  async function runsView(dagId) {
    const offset = Number(params.get("offset") || 0);
    const trail = [["State", href({})], [dagId]];
    const heading = `Runs of ${dagId} with state`;
    const runs = await refused(getJson(`dags/${keyPath(dagId)}/dagRuns`, { limit: PAGE_SIZE, offset }), trail, heading, `the state of DAG ${dagId}`);
    if (!runs) return;
    const rows = runs.dag_runs.map((r) => [h("a", { href: href({ dag_id: dagId, run_id: r.dag_run_id }) }, r.dag_run_id), keyCount(r.keys)]);
    show(
      crumbs(trail), h("h1", {}, heading), status, alertBox,
      // May see the DAG (else 403), yet a token pinned to some runs or tasks sees only theirs.
      rows.length ? table("Runs", ["Run", "Keys"], rows) : h("p", { class: "ts-empty" }, sessionStorage.getItem(TOKEN_KEY) || cfg.login
        ? "No run of this DAG holds state that you may see."
        : "No run of this DAG holds state."),
      pager(runs.total_entries, offset, (o) => { location.search = href({ dag_id: dagId, offset: o }); }, runs.exact_total !== false));
  }

  async function allTaskInstances(dagId, runId) {
    const found = [];
    for (let offset = 0; ; offset += 100) {
      const page = await getJson(`dags/${keyPath(dagId)}/dagRuns/${keyPath(runId)}/taskInstances`, { limit: 100, offset });
      found.push(...page.task_instances);
      if (!page.task_instances.length || found.length >= page.total_entries) return found;
    }
  }

  async function taskInstancesView(dagId, runId) {
    const trail = [["State", href({})], [dagId, href({ dag_id: dagId })], [runId]];
    const heading = `Task instances of ${runId} with state`;
    const instances = await refused(allTaskInstances(dagId, runId), trail, heading, `the state of run ${runId} of DAG ${dagId}`);
    if (!instances) return;
    const rows = instances.map((ti) => [
      h("a", { href: href({ dag_id: dagId, run_id: runId, task_id: ti.task_id, map_index: ti.map_index }) }, ti.task_id),
      ti.map_index === -1 ? "not mapped" : ti.map_index, keyCount(ti.keys)]);
    show(
      crumbs(trail), h("h1", {}, heading), status, alertBox,
      rows.length ? table("Task instances", ["Task", "Map index", "Keys"], rows) : h("p", { class: "ts-empty" }, "No task of this run holds state."));
  }

  // The key-prefix filter of a task's or asset's keys (the API's `key_prefix`).
  function keyFilter(prefix, onChange) {
    const input = h("input", { id: "ts-filter", type: "search", name: "key_prefix", value: prefix, autocomplete: "off" });
    let timer;
    input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => onChange(input.value), 250); });
    return h("label", { for: "ts-filter" }, "Filter keys (prefix)", input);
  }

  // Keep the page and filter in the address, so a reload or a shared link shows the same rows.
  function remember(changes) {
    const search = new URLSearchParams(location.search);
    for (const [name, value] of Object.entries(changes)) {
      if (value) search.set(name, value); else search.delete(name);
    }
    history.replaceState(null, "", `?${search}`);
  }

  function taskPath(dagId, runId, taskId) {
    return `dags/${keyPath(dagId)}/dagRuns/${keyPath(runId)}/taskInstances/${keyPath(taskId)}/state-store`;
  }

  async function taskView(dagId, runId, taskId) {
    const requested = params.get("map_index") || "-1";
    const all = requested === "all";
    const base = taskPath(dagId, runId, taskId);
    const historyBase = base.replace(/state-store$/, "taskstate-history");
    const scopeQuery = { dag_id: dagId, run_id: runId, task_id: taskId, map_index: requested };
    if (!(await allowed("GET", scopeQuery))) {
      show(crumbs([["State", href({})], [dagId, href({ dag_id: dagId })], [runId, href({ dag_id: dagId, run_id: runId })], [taskId]]),
        h("h1", {}, `Task state: ${taskId}`),
        h("p", { class: "ts-error", role: "alert" }, "You may not see this task instance's state: your token or role does not cover it. Ask for one that names this DAG (and run and task), or use another token."));
      return;
    }
    const siblings = (await allTaskInstances(dagId, runId)).filter((ti) => ti.task_id === taskId).map((ti) => ti.map_index);
    const indices = all ? siblings : [Number(requested)];
    const mapped = siblings.some((i) => i >= 0) || indices.some((i) => i >= 0);
    const [mayPut, mayDelete, mayClearAll, mayRestoreAll] = await Promise.all([
      all ? false : allowed("PUT", scopeQuery),
      all ? false : allowed("DELETE", scopeQuery),
      mapped ? allowed("DELETE", { ...scopeQuery, map_index: "all" }) : false,
      all ? allowed("PUT", scopeQuery) : false, // a restore is a write (the API authorises POST as PUT)
    ]);
    const mayRestore = all ? mayRestoreAll : mayPut;
    let offset = Number(params.get("offset") || 0);
    let prefix = params.get("key_prefix") || "";
    const body = h("div", { id: "ts-entries" });
    const label = (index) => (index === -1 ? `task ${taskId}` : `task ${taskId} (map index ${index})`);

    async function load() {
      say("Loading…");
      const pages = await Promise.all(indices.map(async (index) => [index, await getJson(base, { map_index: index, limit: all ? 100 : PAGE_SIZE, offset: all ? 0 : offset, key_prefix: prefix })]));
      const columns = [...(all ? ["Map index"] : []), "Key", "Value", "Updated at", "Expires at", "Last updated by", "Actions"];
      const rows = [];
      let total = 0;
      let exact = true;
      for (const [index, page] of pages) {
        total += page.total_entries;
        exact = exact && page.exact_total !== false;
        for (const entry of page.task_state_store) {
          const actions = h("div", {},
            mayPut ? h("button", { type: "button", onclick: () => edit(entry), "aria-label": `Edit ${entry.key}` }, "Edit") : null,
            mayDelete ? h("button", { type: "button", class: "ts-link-danger", onclick: () => removeKey(entry), "aria-label": `Delete ${entry.key}` }, "Delete") : null,
            h("button", { type: "button", onclick: () => history_(entry, index).catch(report), "aria-label": `History of ${entry.key}` }, "History"));
          rows.push([...(all ? [index] : []), cell("ts-key", entry.key), valueCell(entry.value), cell("ts-when", when(entry.updated_at)), cell("ts-when", when(entry.expires_at)), writer(entry.last_updated_by), cell("ts-actions", actions)]);
        }
      }
      body.replaceChildren(
        rows.length ? table(`State of ${label(indices[0])}`, columns, rows) : h("p", { class: "ts-empty" }, prefix ? `No key starts with "${prefix}".` : "This task instance holds no state."),
        all ? h("p", { class: "ts-meta" }, `${exact ? total : `More than ${total - 1}`} keys across ${indices.length} map indices (at most 100 shown per index).`)
          : pager(total, offset, (o) => { offset = o; load().catch(report); }, exact));
      remember({ offset, key_prefix: prefix });
      say("");
    }

    const keyQuery = { map_index: indices[0] };

    async function edit(entry) {
      const tag = entry ? await versionOf(`${base}/${keyPath(entry.key)}`, keyQuery, entry) : null;
      const outcome = await editorDialog({
        title: entry ? `Edit ${entry.key}` : `Add a key to ${label(indices[0])}`, entry, expiry: true,
        save: async (key, value, choice) => {
          const path = `${base}/${keyPath(key)}`;
          const expires = choice === "keep" ? "default" : choice === "default" ? "default" : choice === "never" ? null : new Date(Date.now() + choice * 86400000).toISOString();
          if (!entry) {
            const response = await call("PUT", path, { query: keyQuery, body: { value, expires_at: expires }, headers: { "If-None-Match": "*" } });
            if (response.status === 412) return `The key "${key}" already exists: edit it instead.`;
            return response.ok ? null : message(response);
          }
          return guarded(path, keyQuery, key, tag, (version) => {
            if (version === null) return call("PUT", path, { query: keyQuery, body: { value, expires_at: expires }, headers: { "If-None-Match": "*" } });
            if (choice === "keep") return call("PATCH", path, { query: keyQuery, body: { value }, headers: { "If-Match": version } });
            return call("PUT", path, { query: keyQuery, body: { value, expires_at: expires }, headers: { "If-Match": version } });
          }, "Overwrite with mine");
        },
      });
      if (outcome) { await load(); say(outcome === "kept" ? `Kept the newer value of ${entry.key}.` : entry ? `Saved ${entry.key}.` : "Added."); }
    }

    async function history_(entry, index) {
      const said = await showHistory(entry, `${base}/${keyPath(entry.key)}`, `${historyBase}/${keyPath(entry.key)}`,
        { map_index: index }, mayPut, `The ${label(index)} in run ${runId}`);
      if (said) { await load(); say(said); }
    }

    async function removeKey(entry) {
      const path = `${base}/${keyPath(entry.key)}`;
      const tag = await versionOf(path, keyQuery, entry);
      const ok = await confirmDialog(`Delete "${entry.key}"?`,
        `The ${label(indices[0])} in run ${runId} loses the value of "${entry.key}": the next time it runs it behaves as if it had never stored it (a task tracking an external job under this key submits the job again).`,
        "Delete key");
      if (!ok) return;
      const problem = await guarded(path, keyQuery, entry.key, tag,
        (version) => call("DELETE", path, { query: keyQuery, headers: { "If-Match": version } }), "Delete anyway");
      if (problem && problem !== KEPT) { fail(problem); return; }
      await load(); say(problem === KEPT ? `Kept the newer value of ${entry.key}.` : `Deleted ${entry.key}.`);
    }

    async function clear(everyIndex) {
      const what = everyIndex ? `every map index of task ${taskId}` : label(indices[0]);
      const ok = await confirmDialog(everyIndex ? "Clear every map index?" : "Clear this task instance?",
        `All state of ${what} in run ${runId} is deleted. The next time it runs it starts from the beginning, as if it had never run: a task tracking an external job submits the job again, and progress it recorded (offsets, watermarks) is forgotten.`,
        everyIndex ? "Clear all map indices" : "Clear task instance");
      if (!ok) return;
      const query = everyIndex ? { all_map_indices: "true" } : { map_index: indices[0] };
      const response = await call("DELETE", base, { query });
      if (!response.ok) { fail(await message(response)); return; }
      offset = 0; await load(); say(everyIndex ? "Cleared every map index." : "Cleared.");
    }

    // "Restore state as of…" (the undo of a clear): the person picks an instant, sees what
    // would change (the preview route writes nothing), then confirms as for an edit. Every map
    // index in the "all" view, else this one.
    async function restoreAsOf() {
      const what = all ? `every map index of task ${taskId}` : label(indices[0]);
      const query = all ? { all_map_indices: "true" } : { map_index: indices[0] };
      const picked = await restoreAsOfDialog(what, historyBase, query, all);
      if (!picked) return;
      const { instant, preview } = picked;
      const back = preview.changes.filter((c) => c.then !== null && !same(c.then, c.now)).length;
      const gone = preview.changes.filter((c) => c.then === null).length;
      const ok = await confirmDialog(`Restore the state of ${what} as of ${timeText(instant)}?`,
        `In run ${runId}, ${count(back, "key")} get back the value held then and ${count(gone, "key")} created since ${gone === 1 ? "is" : "are"} deleted; the next time the task runs it resumes from that state. The values held now stay in each key's history, so this can be undone the same way.`,
        "Restore state");
      if (!ok) return;
      // The state may have moved since the preview: ask again, and restore only what was shown.
      const again = await getJson(historyBase, { ...query, as_of: instant });
      if (JSON.stringify(again.changes) !== JSON.stringify(preview.changes)) {
        fail("The state changed since the preview: nothing was restored. Open Restore state as of… again to see the new preview.");
        return;
      }
      const response = await call("POST", historyBase, { query, body: { as_of: instant } });
      if (!response.ok) { fail(restoreProblem(response.status, await message(response))); return; }
      const restored = (await response.json()).restored;
      offset = 0; await load(); say(`Restored ${count(restored, "key")} of ${what} as of ${timeText(instant)}.`);
    }

    const filter = keyFilter(prefix, (value) => { prefix = value; offset = 0; load().catch(report); });
    const picker = mapped ? h("label", { for: "ts-map-index" }, "Map index",
      h("select", { id: "ts-map-index", onchange: (event) => { location.search = href({ dag_id: dagId, run_id: runId, task_id: taskId, map_index: event.target.value }); } },
        [...new Set([...siblings, ...(all ? [] : indices)])].sort((a, b) => a - b).map((i) => h("option", { value: i, selected: !all && i === indices[0] }, i === -1 ? "not mapped" : String(i))),
        h("option", { value: "all", selected: all }, "All map indices"))) : null;
    const readOnly = !mayPut && !mayDelete && !all;
    show(
      crumbs([["State", href({})], [dagId, href({ dag_id: dagId })], [runId, href({ dag_id: dagId, run_id: runId })], [all ? `${taskId} (all map indices)` : label(indices[0]).replace(/^task /, "")]]),
      h("h1", {}, `Task state: ${taskId}`),
      h("p", { class: "ts-meta" }, `DAG ${dagId} · run ${runId}${all ? " · all map indices" : indices[0] >= 0 ? ` · map index ${indices[0]}` : ""}`),
      h("div", { class: "ts-toolbar" },
        filter, picker,
        h("span", { class: "ts-spacer" }),
        mayPut ? h("button", { type: "button", class: "ts-primary", onclick: () => edit(null) }, "Add key") : null,
        mayDelete ? h("button", { type: "button", class: "ts-link-danger", onclick: () => clear(false) }, "Clear task instance") : null,
        mayClearAll ? h("button", { type: "button", class: "ts-link-danger", onclick: () => clear(true) }, "Clear all map indices") : null,
        mayRestore ? h("button", { type: "button", onclick: () => restoreAsOf().catch(report) }, "Restore state as of…") : null),
      readOnly ? h("p", { class: "ts-readonly" }, "Read-only: you may see this state and its history but not change or restore it.") : null,
      all ? h("p", { class: "ts-readonly" }, "Pick one map index to change its state.") : null,
      status, alertBox, body);
    await load();
  }

  async function assetView(name) {
    const query = { name };
    const [mayPut, mayDelete] = await Promise.all([allowed("PUT", { asset: name }), allowed("DELETE", { asset: name })]);
    let offset = Number(params.get("offset") || 0);
    let prefix = params.get("key_prefix") || "";
    const body = h("div", { id: "ts-entries" });

    async function load() {
      say("Loading…");
      const page = await getJson("assets/state-store", { ...query, limit: PAGE_SIZE, offset, key_prefix: prefix });
      const columns = ["Key", "Value", "Updated at", "Last updated by", "Actions"];
      const rows = page.asset_state_store.map((entry) => [cell("ts-key", entry.key), valueCell(entry.value), cell("ts-when", when(entry.updated_at)), writer(entry.last_updated_by),
        cell("ts-actions", h("div", {},
          mayPut ? h("button", { type: "button", onclick: () => edit(entry), "aria-label": `Edit ${entry.key}` }, "Edit") : null,
          mayDelete ? h("button", { type: "button", class: "ts-link-danger", onclick: () => removeKey(entry), "aria-label": `Delete ${entry.key}` }, "Delete") : null,
          h("button", { type: "button", onclick: () => history_(entry).catch(report), "aria-label": `History of ${entry.key}` }, "History")))]);
      body.replaceChildren(
        rows.length ? table(`State of asset ${name}`, columns, rows) : h("p", { class: "ts-empty" }, prefix ? `No key starts with "${prefix}".` : "This asset holds no state."),
        pager(page.total_entries, offset, (o) => { offset = o; load().catch(report); }, page.exact_total !== false));
      remember({ offset, key_prefix: prefix });
      say("");
    }

    async function edit(entry) {
      const tag = entry ? await versionOf(`assets/state-store/${keyPath(entry.key)}`, query, entry) : null;
      const outcome = await editorDialog({
        title: entry ? `Edit ${entry.key}` : `Add a key to asset ${name}`, entry, expiry: false,
        save: async (key, value) => {
          const path = `assets/state-store/${keyPath(key)}`;
          const put = (version) => call("PUT", path, { query, body: { value }, headers: version ? { "If-Match": version } : { "If-None-Match": "*" } });
          if (entry) return guarded(path, query, key, tag, put, "Overwrite with mine");
          const response = await put(null);
          if (response.status === 412) return `The key "${key}" already exists: edit it instead.`;
          return response.ok ? null : message(response);
        },
      });
      if (outcome) { await load(); say(outcome === "kept" ? `Kept the newer value of ${entry.key}.` : "Saved."); }
    }

    async function history_(entry) {
      const said = await showHistory(entry, `assets/state-store/${keyPath(entry.key)}`, `assets/taskstate-history/${keyPath(entry.key)}`,
        query, mayPut, `Asset ${name}`);
      if (said) { await load(); say(said); }
    }

    async function removeKey(entry) {
      const path = `assets/state-store/${keyPath(entry.key)}`;
      const tag = await versionOf(path, query, entry);
      const ok = await confirmDialog(`Delete "${entry.key}"?`,
        `Asset ${name} loses "${entry.key}": every task that reads it next sees no value (a watermark starts over from the beginning).`, "Delete key");
      if (!ok) return;
      const problem = await guarded(path, query, entry.key, tag,
        (version) => call("DELETE", path, { query, headers: { "If-Match": version } }), "Delete anyway");
      if (problem && problem !== KEPT) { fail(problem); return; }
      await load(); say(problem === KEPT ? `Kept the newer value of ${entry.key}.` : `Deleted ${entry.key}.`);
    }

    show(
      crumbs([["State", href({})], [`asset ${name}`]]),
      h("h1", {}, `Asset state: ${name}`),
      h("div", { class: "ts-toolbar" },
        keyFilter(prefix, (value) => { prefix = value; offset = 0; load().catch(report); }),
        h("span", { class: "ts-spacer" }),
        mayPut ? h("button", { type: "button", class: "ts-primary", onclick: () => edit(null) }, "Add key") : null),
      !mayPut && !mayDelete ? h("p", { class: "ts-readonly" }, "Read-only: you may see this state but not change it.") : null,
      status, alertBox, body);
    await load();
  }

  function report(error) {
    if (error instanceof AuthError) showLogin(error.message);
    else if (root.contains(alertBox)) fail(error.message);
    else show(h("h1", {}, "State"), h("p", { class: "ts-error", role: "alert" }, error.message));
  }

  async function main() {
    const dagId = params.get("dag_id");
    const runId = params.get("run_id");
    const taskId = params.get("task_id");
    const asset = params.get("asset");
    if (asset !== null) await assetView(asset);
    else if (dagId && runId && taskId) await taskView(dagId, runId, taskId);
    else if (dagId && runId) await taskInstancesView(dagId, runId);
    else if (dagId) await runsView(dagId);
    else if ((params.get("view") || cfg.view) === "assets") await assetsView();
    else await homeView();
  }

  followTheme();
  main().catch(report);
})();
