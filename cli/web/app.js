// The person's page: a small sheet, the invitation to hand to an agent, the
// participants and what they do. Every text from the network reaches the
// DOM through textContent, never as markup.

import { SheetServer, parseAddress, formatAddress, columnName } from "./sheet.js";
import { RelayChannel, randomHex } from "./relay.js";

const MIN_COLS = 5;
const MIN_ROWS = 8;
const MAX_COLS = 26;
const MAX_ROWS = 50;
const MAX_LOG = 200;
const MAX_PARTICIPANTS = 50;
const COLOUR = /^#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?$/;
const NEUTRAL = "#6b7280";

// What this tab keeps across a reload, in sessionStorage (this tab only,
// gone with it; never localStorage, never a cookie): the session, its
// token and the sheet (cells, revision counter, change history).
const KEPT_KEY = "human-plus-web-sheet";
const KEPT_VERSION = 1;
const SESSION_ID = /^web_[0-9a-f]{12}$/;
const TOKEN = /^hp_[0-9a-f]{32}$/;
// Tabs of this page ask each other on this channel whether one already
// holds a session (a duplicated tab starts with a copy of the storage).
const TABS_CHANNEL = "human-plus-web-sheet";
const TABS_WAIT_MS = 300;

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") Object.assign(node.style, v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// A short, printable rendering of text from the network.
function clip(value, max = 80) {
  const text = typeof value === "string" ? value : value === undefined || value === null ? "" : JSON.stringify(value);
  // Control characters would only confuse a reader.
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, " ");
  return clean.length > max ? clean.slice(0, max - 1) + "…" : clean;
}

const safeColour = (c) => (typeof c === "string" && COLOUR.test(c) ? c : NEUTRAL);

const newSessionId = () => "web_" + randomHex(6);
const newToken = () => "hp_" + randomHex(16);

// This tab's sessionStorage, or null where the browser refuses it.
function tabStorage() {
  try {
    return window.sessionStorage || null;
  } catch {
    return null;
  }
}

// What this tab kept for this page: `{kind}`, one of "none",
// "unavailable" (no storage), "unreadable", "elsewhere" (kept for another
// relay or surface: the page server was started again with other flags),
// "ending" (a reload came while the person was ending the session, with
// `session` and `token`) or "kept" (with `session`, `token` and `sheet`, a
// snapshot still to be checked).
function readKept(storage, config) {
  if (!storage) return { kind: "unavailable" };
  let raw;
  try {
    raw = storage.getItem(KEPT_KEY);
  } catch {
    return { kind: "unavailable" };
  }
  if (raw === null) return { kind: "none" };
  let kept;
  try {
    kept = JSON.parse(raw);
  } catch {
    return { kind: "unreadable" };
  }
  if (
    !kept || typeof kept !== "object" || kept.v !== KEPT_VERSION ||
    typeof kept.session !== "string" || !SESSION_ID.test(kept.session) ||
    typeof kept.token !== "string" || !TOKEN.test(kept.token)
  ) {
    return { kind: "unreadable" };
  }
  if (kept.relay !== config.relay || kept.surface !== config.surfaceId) return { kind: "elsewhere" };
  if (kept.ending === true) return { kind: "ending", session: kept.session, token: kept.token };
  return { kind: "kept", session: kept.session, token: kept.token, sheet: kept.sheet };
}

class Page {
  constructor(config) {
    this.config = config;
    this.storage = tabStorage();
    this.session = null;
    this.token = null;
    this.server = null;
    this.channel = null;
    this.participants = new Map(); // actor id -> {name, colour, action, target}
    this.peers = new Set(); // relay subscriber ids of agents' legs
    this.dropped = 0;
    this.highlights = new Map(); // actor id -> address
    this.handedOver = false;
    // Whether what this tab keeps follows the session (false once it ended).
    this.keeping = false;
    // The person is ending the session (between the confirmation and the
    // relay's answer).
    this.ending = false;
    this.tabs = typeof BroadcastChannel === "function" ? new BroadcastChannel(TABS_CHANNEL) : null;
    if (this.tabs) {
      this.tabs.addEventListener("message", (e) => {
        const asking = e.data && typeof e.data === "object" ? e.data.asking : null;
        if (asking && asking === this.session) this.tabs.postMessage({ holding: this.session });
      });
    }
  }

  async start() {
    this.bindControls();
    this.renderParticipants();
    await this.open();
  }

  sheetOptions() {
    return { serverVersion: this.config.version || "0", onEvent: (e) => this.onSheetEvent(e) };
  }

  // ------------------------------------------------------------- session

  // Opens the session this tab kept (a reload), or a new one.
  async open() {
    const kept = readKept(this.storage, this.config);
    let note = null;
    if (kept.kind === "kept") {
      let sheet = null;
      try {
        sheet = SheetServer.restore(kept.sheet, this.sheetOptions());
      } catch {
        sheet = null;
      }
      if (sheet && !(await this.heldByAnotherTab(kept.session))) {
        this.begin(kept.session, kept.token, sheet);
        this.log("state", `This tab kept session ${kept.session} across the reload: the same share link, the sheet at ${sheet.revision()}.`);
        return;
      }
      if (sheet) {
        note = `Another open tab holds session ${kept.session} (this tab started as its copy): this tab has a session of its own.`;
      } else {
        // The session without its sheet must not answer again: ended, so
        // an agent holding its link is told so instead of waiting.
        await this.endOnRelay(kept.session, kept.token);
        note = "What this tab kept could not be read, so a new session was started; the old link no longer reaches this page.";
      }
    } else if (kept.kind === "ending") {
      // A reload came while the person was ending that session: finish it.
      const ended = await this.endOnRelay(kept.session, kept.token);
      note = ended
        ? `You ended session ${kept.session}: an agent holding its link is refused now.`
        : `The relay did not confirm the end of session ${kept.session}; no page answers it any more.`;
    } else if (kept.kind === "unreadable") {
      note = "What this tab kept could not be read, so a new session was started; the old link no longer reaches this page.";
    } else if (kept.kind === "elsewhere") {
      note = "This tab kept a session on another relay; a new session was started on this one.";
    }
    this.begin(newSessionId(), newToken(), new SheetServer(this.sheetOptions()));
    if (note) this.log("state", note);
  }

  // Unregisters a session this page no longer shows; whether the relay
  // confirmed it.
  async endOnRelay(session, token) {
    const old = new RelayChannel({
      base: this.config.relay,
      session,
      token,
      auth: this.config.relayAuth,
      handlers: { frame() {}, state() {}, dropped() {} },
    });
    let ended = false;
    try {
      ended = await old.unregister();
    } catch {
      ended = false;
    }
    old.close();
    return ended;
  }

  // Whether another open tab of this page holds `session`: a duplicated
  // tab (or one this page opened) starts with a copy of this tab's
  // storage, and two pages answering one session would be two sheets
  // under one set of revisions. Asked over a BroadcastChannel, which only
  // this origin's tabs hear; a tab that is reloading has no page to answer.
  heldByAnotherTab(session) {
    const tabs = this.tabs;
    if (!tabs) return Promise.resolve(false);
    return new Promise((resolve) => {
      const listener = (e) => {
        if (e.data && typeof e.data === "object" && e.data.holding === session) done(true);
      };
      const done = (held) => {
        clearTimeout(timer);
        tabs.removeEventListener("message", listener);
        resolve(held);
      };
      const timer = setTimeout(() => done(false), TABS_WAIT_MS);
      tabs.addEventListener("message", listener);
      tabs.postMessage({ asking: session });
    });
  }

  // Makes `session` (with `token` and `sheet`) this page's, keeps it in
  // this tab, shows it, and registers it on the relay.
  begin(session, token, sheet) {
    this.session = session;
    this.token = token;
    this.server = sheet;
    this.handedOver = false;
    this.keeping = true;
    const channel = new RelayChannel({
      base: this.config.relay,
      session,
      token,
      transport: this.config.transport,
      auth: this.config.relayAuth,
      handlers: {
        frame: (text) => {
          if (channel === this.channel) this.onFrame(text);
        },
        state: (name, info, detail) => {
          if (channel === this.channel) this.onState(name, info, detail);
        },
        dropped: (reason) => {
          if (channel === this.channel) this.onDropped(reason);
        },
      },
    });
    this.channel = channel;
    this.keep();
    this.renderInvitation();
    this.renderGrid();
    this.renderEnd();
    channel.start();
  }

  // Writes what this tab keeps. Called on every change of the sheet,
  // before the answer that reports it is posted, so a reload never finds
  // a sheet older than what an agent was told. A write that fails (the
  // storage is full) removes what was kept: a reload then starts a new
  // session rather than an older sheet under this one.
  keep() {
    if (!this.keeping || this.ending) return;
    let why = null;
    if (!this.storage) {
      why = "this browser lets the page keep nothing in this tab";
    } else {
      try {
        this.storage.setItem(KEPT_KEY, JSON.stringify({
          v: KEPT_VERSION,
          relay: this.config.relay,
          surface: this.config.surfaceId,
          session: this.session,
          token: this.token,
          sheet: this.server.snapshot(),
        }));
      } catch {
        why = "this tab could not keep the sheet (its storage is full)";
        this.forget();
      }
    }
    $("kept").textContent = why
      ? `Reloading this tab will start a new session: ${why}.`
      : "Reloading this tab keeps this session, its link and the sheet.";
    $("kept").dataset.kept = why ? "no" : "yes";
  }

  // Removes what this tab keeps.
  forget() {
    try {
      if (this.storage) this.storage.removeItem(KEPT_KEY);
    } catch {
      // nothing was kept, or nothing can be
    }
  }

  // ------------------------------------------------------- ending it

  renderEnd() {
    const ended = !this.channel || this.channel.ended;
    $("end-session").textContent = ended ? "Start a new session" : "End this session and start a new one";
    $("end-session").disabled = this.ending;
    $("end-session").hidden = !$("end-confirm").hidden;
  }

  askToEnd() {
    $("end-note").textContent = "";
    // A session that is over has nothing left to confirm.
    if (!this.channel || this.channel.ended) {
      this.endSession();
      return;
    }
    $("end-confirm").hidden = false;
    this.renderEnd();
    $("end-no").focus();
  }

  cancelEnd() {
    $("end-confirm").hidden = true;
    this.renderEnd();
  }

  // Ends this session on the relay (every agent holding its link is
  // refused from then on), forgets it, and starts a new one with a new
  // token, link and sheet.
  async endSession() {
    if (this.ending) return;
    this.ending = true;
    $("end-confirm").hidden = true;
    this.renderEnd();
    const old = { session: this.session, token: this.token, channel: this.channel };
    if (!old.channel.ended) {
      // A reload from here on finishes the end instead of reusing the
      // session.
      try {
        this.storage.setItem(KEPT_KEY, JSON.stringify({
          v: KEPT_VERSION,
          relay: this.config.relay,
          surface: this.config.surfaceId,
          session: old.session,
          token: old.token,
          ending: true,
        }));
      } catch {
        // no storage: a reload starts a new session anyway
      }
      let ended = false;
      try {
        ended = await old.channel.unregister();
      } catch {
        ended = false;
      }
      if (!ended && !old.channel.ended) {
        this.ending = false;
        this.keep();
        this.renderEnd();
        $("end-note").textContent =
          "The relay did not confirm the end of this session, so nothing changed: the link still works. Try again.";
        return;
      }
    }
    old.channel.close();
    this.forget();
    this.ending = false;
    this.participants.clear();
    this.peers.clear();
    this.highlights.clear();
    $("asks").hidden = true;
    $("gone").hidden = true;
    delete document.body.dataset.ended;
    for (const input of $("grid").querySelectorAll("input")) input.disabled = false;
    this.renderParticipants();
    this.begin(newSessionId(), newToken(), new SheetServer(this.sheetOptions()));
    this.log("state", `You ended session ${old.session}: an agent holding its link is refused now (the relay answers 410). This is session ${this.session}, with a new link.`);
  }

  // ---------------------------------------------------------- invitation

  // The page's buttons, bound once; each acts on the current session.
  bindControls() {
    $("copy-link").addEventListener("click", () => this.copy(this.shareLink(), "link"));
    $("show-link").addEventListener("click", () => {
      const shown = $("show-link").textContent === "Hide";
      this.renderShareLink(!shown);
      $("show-link").textContent = shown ? "Show" : "Hide";
    });
    $("copy-token").addEventListener("click", () => this.copy(this.token, "token"));
    $("copy-invitation").addEventListener("click", () =>
      this.copy(JSON.stringify({
        relay: this.config.relay,
        session: this.session,
        token: this.token,
        surfaceId: this.config.surfaceId,
        application: this.config.application,
      }), "invitation"));
    $("show-token").addEventListener("click", () => {
      const input = $("inv-token");
      const hidden = input.type === "password";
      input.type = hidden ? "text" : "password";
      $("show-token").textContent = hidden ? "Hide" : "Show";
    });
    $("end-session").addEventListener("click", () => this.askToEnd());
    $("end-yes").addEventListener("click", () => this.endSession());
    $("end-no").addEventListener("click", () => this.cancelEnd());
    // The demo's agent holds the one invitation the page handed over, and
    // the demo ends the session itself.
    $("end").hidden = !!this.config.demo;
  }

  // What the current session's invitation shows (the token masked).
  renderInvitation() {
    $("inv-relay").textContent = this.config.relay;
    $("inv-session").textContent = this.session;
    $("inv-surface").textContent = this.config.surfaceId;
    $("inv-token").value = this.token;
    $("inv-token").type = "password";
    $("show-token").textContent = "Show";
    this.renderShareLink(false);
    $("show-link").textContent = "Show";
    $("join-command").textContent = this.joinCommand();
  }

  // The share link: the relay's own session URL (its base, prefix
  // included, then the session id), as the Fancy relay's session URLs are,
  // with the token in the fragment, as agent-integrations' buildShareUrl
  // puts it (a fragment is never sent to a server), and the surface id
  // beside it. The link's host is the relay's: where an agent's requests
  // will go is what the person sees. `token` stands in for the token while
  // it is hidden.
  shareLink(token = this.token) {
    const fragment = new URLSearchParams({ token, surface: this.config.surfaceId });
    return `${this.config.relay}/${encodeURIComponent(this.session)}#${fragment}`;
  }

  renderShareLink(shown) {
    $("share-link").textContent = shown ? this.shareLink() : this.shareLink("TOKEN-HIDDEN").replace("TOKEN-HIDDEN", "\u2022".repeat(8));
  }

  // The one line that turns the link into a profile and a bridge. The link
  // is never on a command line: `read -rs` takes it from the terminal
  // without showing it, into HUMAN_PLUS_INVITATION, which join reads; the
  // subshell forgets it afterwards, and join's questions still come to the
  // terminal. A relay on plain http (this machine's, for dogfooding) needs
  // the two loopback flags.
  joinCommand() {
    const relay = new URL(this.config.relay);
    const loopback = relay.protocol === "http:" ? " --allow-insecure-loopback --allow-unverified-egress" : "";
    return `(read -rs HUMAN_PLUS_INVITATION && export HUMAN_PLUS_INVITATION && human-plus join --name web-sheet${loopback})`;
  }

  async copy(text, what) {
    let copied = false;
    try {
      await navigator.clipboard.writeText(text);
      copied = true;
    } catch {
      const area = el("textarea", { style: { position: "fixed", opacity: "0" } });
      area.value = text;
      document.body.append(area);
      area.select();
      try {
        copied = document.execCommand("copy");
      } catch {
        copied = false;
      }
      area.remove();
    }
    $("copied").textContent = copied
      ? `The ${what} is on the clipboard.`
      : what === "invitation"
        ? "This browser did not allow copying: press Show beside the token and copy the parts by hand."
        : `This browser did not allow copying: press Show, then select the ${what} and copy it.`;
  }

  // --------------------------------------------------------------- sheet

  renderGrid() {
    let cols = MIN_COLS;
    let rows = MIN_ROWS;
    for (const [r, c] of this.server.entries()) {
      cols = Math.max(cols, Math.min(c, MAX_COLS));
      rows = Math.max(rows, Math.min(r, MAX_ROWS));
    }
    const grid = $("grid");
    if (grid.dataset.cols === String(cols) && grid.dataset.rows === String(rows)) {
      this.refreshCells();
      return;
    }
    grid.dataset.cols = String(cols);
    grid.dataset.rows = String(rows);
    const head = el("tr", {}, el("th", {}));
    for (let c = 1; c <= cols; c++) head.append(el("th", { scope: "col" }, columnName(c)));
    const body = [head];
    for (let r = 1; r <= rows; r++) {
      const tr = el("tr", {}, el("th", { scope: "row" }, String(r)));
      for (let c = 1; c <= cols; c++) {
        const address = formatAddress(r, c);
        const input = el("input", { type: "text", "data-address": address, "aria-label": address, spellcheck: "false" });
        input.addEventListener("focus", () => {
          input.dataset.before = input.value;
        });
        input.addEventListener("keydown", (e) => {
          if (e.key === "Enter") {
            e.preventDefault();
            this.commit(input);
            input.blur();
          } else if (e.key === "Escape") {
            input.value = input.dataset.before ?? input.value;
            input.blur();
          }
        });
        input.addEventListener("blur", () => this.commit(input));
        tr.append(el("td", {}, input));
      }
      body.push(tr);
    }
    grid.replaceChildren(...body);
    this.refreshCells();
  }

  refreshCells() {
    for (const input of $("grid").querySelectorAll("input[data-address]")) {
      const value = this.server.cell(input.dataset.address) ?? "";
      // Never overwrite what the person is typing; their commit decides.
      if (document.activeElement === input && input.value !== (input.dataset.before ?? "")) continue;
      input.value = value;
      if (document.activeElement === input) input.dataset.before = value;
    }
    $("revision").textContent = this.server.revision();
    this.renderHighlights();
  }

  commit(input) {
    const address = input.dataset.address;
    const before = input.dataset.before;
    delete input.dataset.before;
    if (before === undefined || input.value === before) return;
    if ((this.server.cell(address) ?? "") === input.value) return;
    const value = input.value;
    const revision = this.server.setCell("human", address, value);
    if (this.config.demo) {
      this.post("/demo/edit", { address, value, revision });
    }
  }

  flash(address, kind) {
    const input = $("grid").querySelector(`input[data-address="${address}"]`);
    if (!input) return;
    input.classList.remove("flash-agent", "flash-refused");
    void input.offsetWidth; // restart the animation
    input.classList.add(kind);
  }

  renderHighlights() {
    for (const input of $("grid").querySelectorAll("input.claimed")) {
      input.classList.remove("claimed");
      input.style.removeProperty("--claim");
      input.removeAttribute("title");
    }
    for (const [id, address] of this.highlights) {
      const p = this.participants.get(id);
      const input = $("grid").querySelector(`input[data-address="${address}"]`);
      if (!p || !input) continue;
      input.classList.add("claimed");
      input.style.setProperty("--claim", p.colour);
      input.title = `${p.name}: ${p.action}`;
    }
  }

  // ------------------------------------------------------------- relay

  onFrame(text) {
    let reply;
    try {
      reply = this.server.handleFrame(text);
    } catch {
      reply = null; // handleFrame never throws; a page must not break if it did
    }
    if (reply) this.channel.send(reply);
  }

  onDropped(reason) {
    this.dropped += 1;
    $("dropped").textContent = `${this.dropped} unreadable frame(s) dropped`;
    $("dropped").hidden = false;
    this.log("dropped", `Dropped a frame from the relay: ${clip(reason)}.`);
  }

  onState(name, info, detail) {
    const terminal = name === "gone" || name === "unauthorized" || name === "failed";
    // While the person ends the session the relay's 410 is expected: the
    // end decides what the page shows.
    if (terminal && this.ending) return;
    if (terminal && !(name === "failed" && detail && detail.network)) {
      // Over for good: a reload must not bring it back. (A relay that could
      // not be reached may still have it: a reload tries again.)
      this.keeping = false;
      this.forget();
      $("kept").textContent = "";
    }
    const status = $("status");
    status.dataset.state = name;
    const next = this.config.demo ? "reload to start a new session" : "press “Start a new session” (or reload) for a new one";
    const text = {
      registering: "Registering the session…",
      sse: "Live: receiving on the event stream",
      poll: "Live: receiving on the long-poll leg" + (info ? ` (${info})` : ""),
      reconnecting: "Reconnecting" + (info ? `: ${info}` : "…"),
      rejoined: "The relay had forgotten this session (it restarted): the page registered it again, with the same link and token.",
      gone: `This session is gone: the relay answered 410. Agents can no longer reach this page; ${next}.`,
      unauthorized: `The relay refused this page's token (401); ${next}.`,
      failed: "Could not open the session" + (info ? `: ${info}` : "."),
    }[name] || name;
    status.textContent = text;
    if (name === "rejoined") {
      // The agents' legs were on the relay that went away.
      this.peers.clear();
      this.renderParticipants();
    }
    if (name === "sse" || name === "poll") {
      $("transport").textContent = name === "sse" ? "event stream (SSE)" : "long-poll";
      if (!this.handedOver && this.config.demo) {
        this.handedOver = true;
        this.post("/demo/invitation", {
          relay: this.config.relay,
          session: this.session,
          token: this.token,
          surfaceId: this.config.surfaceId,
        });
      }
    }
    if (terminal) {
      document.body.dataset.ended = name;
      $("gone").hidden = false;
      $("gone").textContent = text;
      for (const input of $("grid").querySelectorAll("input")) input.disabled = true;
      $("end-confirm").hidden = true;
    }
    this.renderEnd();
    if (name !== "registering" && name !== "sse") this.log("state", text);
  }

  // Same-origin reports to the page server, in demo mode only.
  post(path, body) {
    fetch(path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    }).catch(() => {});
  }

  // ------------------------------------------------- what the sheet saw

  onSheetEvent(e) {
    switch (e.type) {
      case "change":
        // Kept before the answer that reports the change is posted.
        this.keep();
        this.renderGrid();
        if (e.actor === "agent" && e.kind === "cell") this.flash(e.handle, "flash-agent");
        this.log(e.actor === "human" ? "human" : "write",
          e.actor === "human"
            ? `You ${e.change} ${e.handle}${e.value ? ` = ${clip(e.value, 40)}` : ""} (${e.revision}).`
            : `An agent ${e.change} ${e.label}${e.value ? ` = ${clip(e.value, 40)}` : ""} (${e.revision}).`);
        break;
      case "call":
        this.onCall(e);
        break;
      case "notification":
        this.onNotification(e.method, e.params);
        break;
      case "dropped":
        this.onDropped(e.reason);
        break;
      default:
        break;
    }
  }

  onCall(e) {
    const args = e.arguments || {};
    const where = typeof args.address === "string" ? ` ${clip(args.address, 12)}` : "";
    const pin = e.pinned === null ? "" : ` pinned to ${clip(e.pinned, 24)}`;
    if (e.outcome.kind === "refused") {
      const key = parseAddress(args.address);
      if (key) this.flash(formatAddress(key[0], key[1]), "flash-refused");
      this.log("refused",
        `Refused ${clip(e.tool, 40)}${where}${"value" in args ? ` = ${clip(args.value, 40)}` : ""}${pin}: ` +
        `the sheet is at ${e.outcome.current}. Nothing was applied.`);
    } else if (e.outcome.kind === "failed") {
      this.log("failed", `${clip(e.tool, 40)}${where} failed: ${clip(e.outcome.message)}`);
    } else if (e.outcome.kind === "read") {
      this.log("read", `An agent read: ${clip(e.tool, 40)}${where}${pin}.`);
    }
    // Writes are logged by their change.
  }

  onNotification(method, params) {
    if (method === "notifications/peer_joined" || method === "notifications/peer_left") {
      const id = params && typeof params.subscriberId === "string" ? params.subscriberId : null;
      if (!id) return;
      if (method === "notifications/peer_joined" && this.peers.size < 1000) this.peers.add(id);
      if (method === "notifications/peer_left") this.peers.delete(id);
      this.renderParticipants();
      return;
    }
    if (method === "notifications/human-plus/activity" && params && typeof params === "object") {
      const actor = params.actor && typeof params.actor === "object" ? params.actor : {};
      const id = clip(actor.id || "unknown", 64);
      if (!this.participants.has(id) && this.participants.size >= MAX_PARTICIPANTS) return;
      const p = {
        name: clip(actor.name || id, 48),
        colour: safeColour(actor.color),
        type: actor.type === "agent" ? "agent" : clip(actor.type || "agent", 16),
        action: clip(params.action, 60),
        target: typeof params.target === "string" ? clip(params.target, 32) : "",
        priority: clip(params.priority || "normal", 16),
      };
      this.participants.set(id, p);
      const key = parseAddress(p.target);
      if (key) this.highlights.set(id, formatAddress(key[0], key[1]));
      else this.highlights.delete(id);
      this.renderParticipants();
      this.renderHighlights();
      this.log("activity", `${p.name} (${p.type}): ${p.action}${p.target ? " " + p.target : ""} [${p.priority}]`, p.colour);
      if (p.priority === "blocking") {
        $("asks").hidden = false;
        $("asks").textContent = `${p.name} is waiting for you: ${p.action}${p.target ? " " + p.target : ""}.`;
        $("asks").style.borderColor = p.colour;
      } else if ($("asks").textContent.startsWith(p.name + " ")) {
        $("asks").hidden = true;
      }
    }
  }

  renderParticipants() {
    const list = $("participants");
    const items = [el("li", { class: "participant you" }, el("span", { class: "swatch", style: { background: "#0f766e" } }), el("span", { class: "name" }, "You"), el("span", { class: "what" }, "the person at this page"))];
    for (const [id, p] of this.participants) {
      items.push(el("li", { class: "participant", "data-actor": id },
        el("span", { class: "swatch", style: { background: p.colour } }),
        el("span", { class: "name", style: { color: p.colour } }, p.name),
        el("span", { class: "what" }, `${p.type} · ${p.action}${p.target ? " " + p.target : ""}`)));
    }
    list.replaceChildren(...items);
    $("peers").textContent =
      `Agent receive legs open on the relay now: ${this.peers.size}. A connected agent keeps one open while it is attached ` +
      "(the human-plus mcp bridge, for its whole session); a one-shot command's closes when it ends, or, on the long-poll leg, " +
      "when the relay prunes it a minute or two later.";
  }

  log(kind, text, colour) {
    const time = new Date().toLocaleTimeString([], { hour12: false });
    const entry = el("li", { class: "log-" + kind }, el("time", {}, time), " ", text);
    if (colour) entry.style.borderLeftColor = colour;
    const log = $("log");
    log.prepend(entry);
    while (log.children.length > MAX_LOG) log.lastElementChild.remove();
  }
}

async function main() {
  // Nothing the page needs ever comes in its address: drop whatever was
  // put there, so it cannot linger in history or be copied along.
  if (location.search || location.hash) history.replaceState(null, "", location.pathname);
  let config;
  try {
    const response = await fetch("/config.json", { cache: "no-store" });
    config = await response.json();
  } catch {
    $("status").textContent = "The page server did not answer.";
    return;
  }
  const page = new Page(config);
  await page.start();
}

main();
