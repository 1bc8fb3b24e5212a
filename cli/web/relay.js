// The page's side of the relay, as a Fancy page speaks it: register the
// session, receive on EventSource (`direction=inbound`), fall back to the
// long-poll leg when the stream fails (as fancy-cf-relay does), and POST
// every reply to `outbox` as single-line JSON. The token is never logged or
// shown. Its `fetch`es (poll, outbox) carry it in an `Authorization: Bearer`
// header, so a failing request, which the browser's console shows with its
// URL, shows no token; only a relay that reads the query alone (the Fancy
// Node relay) gets it in the query, and only the EventSource URL always has
// it there (EventSource cannot send a header).
//
// A 410 means the session was ended, except after an outage: when the
// receive leg failed at the network level (the relay could not be reached)
// and the relay then answers 410, a relay that restarted has forgotten the
// session, and the page registers the same session again, with the same
// token, and carries on.

// Frames bigger than this are dropped unread (the Rust surface drops
// oversize SSE events the same way; the relay itself caps posts at 256 KiB).
export const MAX_FRAME_CHARS = 1024 * 1024;
// An event stream that fails before it delivers anything, or within this
// long of opening, is given up for the long-poll leg.
const SSE_GRACE_MS = 8000;
const POLL_WAIT_MS = 20000;
const MAX_BACKOFF_MS = 4000;

const enc = encodeURIComponent;

// 16 random bytes as hex (or `bytes` of them).
export function randomHex(bytes = 16) {
  const buf = new Uint8Array(bytes);
  crypto.getRandomValues(buf);
  return Array.from(buf, (b) => b.toString(16).padStart(2, "0")).join("");
}

// A relay session this page owns. `handlers`:
//   frame(text)        an inbound frame, already size-checked
//   state(name, info, detail)
//                      "registering" | "sse" | "poll" | "reconnecting" |
//                      "rejoined" (registered again after an outage) |
//                      "gone" | "unauthorized" | "failed" (`detail.network`:
//                      the relay could not be reached, so the session may
//                      still be there)
//   dropped(reason)    a frame that was not read
export class RelayChannel {
  // `auth`: where the fetches put the token. "bearer": the header;
  // "query": `?token=`; "auto": the header until the relay answers one with
  // 401 (it reads only the query), then the query. The page registered the
  // token itself, so that 401 cannot mean a wrong token.
  constructor({ base, session, token, transport = "auto", auth = "auto", handlers }) {
    this.base = base.replace(/\/+$/, "");
    this.session = session;
    this.token = token;
    this.transport = transport;
    this.auth = auth === "bearer" || auth === "query" ? auth : "auto";
    this.h = handlers;
    this.ended = false;
    // Each receive leg the channel opens is a generation; a leg of an older
    // one stops at its next step. `legAbort` cancels the current one's
    // requests.
    this.gen = 0;
    this.legAbort = null;
    this.es = null;
    this.subscriber = "";
    this.sendQueue = Promise.resolve();
    this.abort = new AbortController();
    // The receive leg failed at the network level (the relay could not be
    // reached) since it last worked: a 410 now means a relay that forgot
    // the session.
    this.outage = false;
    this.rejoining = false;
  }

  // A session route's URL; the token in its query only when `withToken`.
  url(route, query, withToken) {
    const q = [withToken ? `token=${enc(this.token)}` : "", query].filter(Boolean).join("&");
    return `${this.base}/${enc(this.session)}/${route}${q ? "?" + q : ""}`;
  }

  // A fetch of a session route with the token where `auth` says.
  async relayFetch(route, query, init) {
    const inQuery = this.auth === "query";
    const headers = { ...(init.headers || {}) };
    if (!inQuery) headers.authorization = `Bearer ${this.token}`;
    const response = await fetch(this.url(route, query, inQuery), { ...init, headers });
    if (this.auth !== "auto") return response;
    if (response.status === 401) {
      // A relay that does not read the header; nothing was delivered
      // (a 401 forwards nothing), so asking again cannot deliver twice.
      this.auth = "query";
      return fetch(this.url(route, query, true), init);
    }
    if (response.ok) this.auth = "bearer";
    return response;
  }

  // POST /register with this session and token (the relay takes the same
  // pair again, and slides its TTL). `{ok: true}`, `{network: true}` when
  // the relay could not be reached, or `{reason}` when it refused.
  async register() {
    let response;
    try {
      response = await fetch(`${this.base}/register`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ session: this.session, token: this.token }),
        signal: this.abort.signal,
      });
    } catch {
      return { network: true };
    }
    if (response.status === 200) return { ok: true };
    let reason = "HTTP " + response.status;
    try {
      const body = await response.json();
      if (body && typeof body.error === "string") reason = body.error.slice(0, 80);
    } catch {
      // the status is enough
    }
    return { reason };
  }

  async start() {
    this.h.state("registering");
    const registered = await this.register();
    if (this.ended) return;
    if (registered.network) return this.end("failed", "the relay could not be reached", { network: true });
    if (!registered.ok) return this.end("failed", "the relay refused to register the session: " + registered.reason);
    this.openLeg();
  }

  // Opens the receive leg the page was configured for, as a new
  // generation (an older leg stops).
  openLeg() {
    this.stopLeg();
    this.subscriber = "";
    if (this.transport === "poll") this.startPoll("chosen", this.gen);
    else this.startSse(this.gen);
  }

  stopLeg() {
    this.gen += 1;
    if (this.es) this.es.close();
    this.es = null;
    if (this.legAbort) this.legAbort.abort();
    this.legAbort = new AbortController();
  }

  end(state, info, detail) {
    if (this.ended) return;
    this.close();
    this.h.state(state, info, detail || {});
  }

  // Stops everything without a word (the page moves to another session).
  close() {
    this.ended = true;
    this.stopLeg();
    this.abort.abort();
  }

  // The relay answered 410. After an outage it is a relay that forgot the
  // session (it restarted, or expired the session while it could not be
  // reached): register the same session again and carry on. Otherwise the
  // session was ended.
  async sessionGone() {
    if (this.ended || this.rejoining) return;
    if (!this.outage) return this.end("gone");
    this.rejoining = true;
    this.stopLeg();
    this.h.state("reconnecting", "the relay has forgotten this session; registering it again");
    let backoff = 250;
    for (;;) {
      const registered = await this.register();
      if (this.ended) return;
      if (registered.ok) break;
      if (!registered.network) {
        this.rejoining = false;
        return this.end("failed", "the relay refused to register the session again: " + registered.reason);
      }
      await sleep(backoff);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
    this.rejoining = false;
    this.outage = false;
    this.h.state("rejoined");
    this.openLeg();
  }

  // Whether the relay can be reached at all: a request with no token and
  // no CORS (its answer is opaque, and any answer will do). Run when the
  // event stream breaks, which EventSource does not explain: a stream the
  // relay ended and a relay that went away look the same to it.
  probe(signal) {
    fetch(`${this.base}/`, { mode: "no-cors", cache: "no-store", signal }).catch(() => {
      if (!signal.aborted && !this.ended) this.outage = true;
    });
  }

  // POST unregister: the relay drops the session, and every agent holding
  // its link is answered 410 from then on. True when the relay no longer
  // has the session (ended now, or already gone); throws when the relay
  // could not be reached.
  async unregister() {
    const response = await this.relayFetch("unregister", "", {
      method: "POST",
      signal: this.abort.signal,
    });
    return response.status === 200 || response.status === 410;
  }

  deliver(text) {
    if (this.ended) return;
    if (typeof text !== "string") {
      this.h.dropped("not text");
      return;
    }
    if (text.length > MAX_FRAME_CHARS) {
      this.h.dropped(`oversize (${text.length} characters)`);
      return;
    }
    this.h.frame(text);
  }

  // ------------------------------------------------------------- SSE leg

  startSse(gen) {
    const opened = Date.now();
    const signal = this.legAbort.signal;
    const current = () => !this.ended && gen === this.gen;
    let delivered = false;
    // The one URL with the token whatever `auth` says.
    const es = new EventSource(this.url("events", "direction=inbound", true));
    this.es = es;
    const onFrame = (event) => {
      if (!current()) return;
      delivered = true;
      this.deliver(event.data);
    };
    es.addEventListener("open", () => {
      if (!current()) return;
      this.outage = false;
      this.h.state("sse");
    });
    es.addEventListener("mcp", onFrame);
    es.addEventListener("message", onFrame);
    es.addEventListener("error", (event) => {
      if (!current()) {
        es.close();
        return;
      }
      // The relay's own `event: error` carries a reason in `data`.
      if (typeof event.data === "string") {
        if (event.data === "session_gone") return this.sessionGone();
        if (event.data === "invalid_token") return this.end("unauthorized");
        return;
      }
      const early = !delivered || Date.now() - opened < SSE_GRACE_MS;
      if (es.readyState === EventSource.CLOSED || early) {
        // The browser gave up (a non-200 answer), or the stream broke
        // before it proved itself: ask the poll leg what is going on, and
        // stay on it if it works.
        es.close();
        this.es = null;
        this.startPoll(early ? "the event stream failed" : "the event stream closed", gen);
      } else {
        // EventSource reconnects by itself (retry: 2000); `open` says when.
        // Whether the relay is still there decides what a 410 will mean.
        this.h.state("reconnecting", "the event stream broke");
        this.probe(signal);
      }
    });
  }

  // ------------------------------------------------------- long-poll leg

  async startPoll(why, gen) {
    const signal = this.legAbort.signal;
    const current = () => !this.ended && gen === this.gen;
    let backoff = 250;
    let announced = false;
    let healthy = false;
    const trouble = (info) => {
      healthy = false;
      this.h.state("reconnecting", info);
    };
    while (current()) {
      const wait = announced ? POLL_WAIT_MS : 0;
      let response;
      try {
        response = await this.relayFetch("poll", `direction=inbound&wait=${wait}&subscriber=${enc(this.subscriber)}`, {
          cache: "no-store",
          signal,
        });
      } catch {
        if (!current()) return;
        this.outage = true;
        trouble("the relay could not be reached");
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      if (!current()) return;
      if (response.status === 410) return this.sessionGone();
      if (response.status === 401) return this.end("unauthorized");
      if (response.status !== 200) {
        trouble("the poll leg answered HTTP " + response.status);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      let body;
      try {
        const text = await response.text();
        body = JSON.parse(text);
      } catch {
        if (!current()) return;
        this.h.dropped("an unreadable poll answer");
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      if (!current()) return;
      backoff = 250;
      announced = true;
      this.outage = false;
      if (!healthy) {
        healthy = true;
        this.h.state("poll", why);
      }
      if (body && typeof body.subscriber === "string" && /^[a-f0-9]{16}$/.test(body.subscriber)) {
        this.subscriber = body.subscriber;
      }
      const frames = body && Array.isArray(body.frames) ? body.frames : [];
      for (const f of frames) {
        // Frames are JSON strings (the raw POST bodies); anything else is
        // not what the relay sends.
        if (typeof f === "string") this.deliver(f);
        else this.h.dropped("a poll frame that is not a string");
      }
    }
  }

  // ---------------------------------------------------------------- send

  // POSTs one reply or notification to `outbox`, in order.
  send(message) {
    const body = JSON.stringify(message);
    this.sendQueue = this.sendQueue.then(async () => {
      if (this.ended) return;
      try {
        const response = await this.relayFetch("outbox", "", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          signal: this.abort.signal,
        });
        if (response.status === 410) this.sessionGone();
        else if (response.status === 401) this.end("unauthorized");
      } catch {
        // The receive leg reports an unreachable relay (and its failure is
        // what makes a later 410 mean a relay that forgot the session).
      }
    });
    return this.sendQueue;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
