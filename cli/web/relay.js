// The page's side of the relay, as a Fancy page speaks it: register the
// session, receive on EventSource (`direction=inbound`), fall back to the
// long-poll leg when the stream fails (as fancy-cf-relay does), and POST
// every reply to `outbox` as single-line JSON. The token is never logged or
// shown. Its `fetch`es (poll, outbox) carry it in an `Authorization: Bearer`
// header, so a failing request, which the browser's console shows with its
// URL, shows no token; only a relay that reads the query alone (the Fancy
// Node relay) gets it in the query, and only the EventSource URL always has
// it there (EventSource cannot send a header).

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
//   state(name, info)  "registering" | "sse" | "poll" | "gone" | "unauthorized" | "failed"
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
    this.leg = null;
    this.es = null;
    this.subscriber = "";
    this.sendQueue = Promise.resolve();
    this.abort = new AbortController();
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

  async start() {
    this.h.state("registering");
    let response;
    try {
      response = await fetch(`${this.base}/register`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ session: this.session, token: this.token }),
        signal: this.abort.signal,
      });
    } catch {
      return this.end("failed", "the relay could not be reached");
    }
    if (response.status !== 200) {
      let reason = "HTTP " + response.status;
      try {
        const body = await response.json();
        if (body && typeof body.error === "string") reason = body.error.slice(0, 80);
      } catch {
        // the status is enough
      }
      return this.end("failed", "the relay refused to register the session: " + reason);
    }
    if (this.transport === "poll") this.startPoll("chosen");
    else this.startSse();
  }

  end(state, info) {
    if (this.ended) return;
    this.ended = true;
    if (this.es) this.es.close();
    this.abort.abort();
    this.h.state(state, info);
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

  startSse() {
    const opened = Date.now();
    let delivered = false;
    // The one URL with the token whatever `auth` says.
    const es = new EventSource(this.url("events", "direction=inbound", true));
    this.es = es;
    const onFrame = (event) => {
      delivered = true;
      this.deliver(event.data);
    };
    es.addEventListener("open", () => {
      if (!this.ended) this.h.state("sse");
    });
    es.addEventListener("mcp", onFrame);
    es.addEventListener("message", onFrame);
    es.addEventListener("error", (event) => {
      if (this.ended) return;
      // The relay's own `event: error` carries a reason in `data`.
      if (typeof event.data === "string") {
        if (event.data === "session_gone") return this.end("gone");
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
        this.startPoll(early ? "the event stream failed" : "the event stream closed");
      } else {
        // EventSource reconnects by itself (retry: 2000); `open` says when.
        this.h.state("reconnecting", "the event stream broke");
      }
    });
  }

  // ------------------------------------------------------- long-poll leg

  async startPoll(why) {
    if (this.leg === "poll" || this.ended) return;
    this.leg = "poll";
    let backoff = 250;
    let announced = false;
    let healthy = false;
    const trouble = (info) => {
      healthy = false;
      this.h.state("reconnecting", info);
    };
    while (!this.ended) {
      const wait = announced ? POLL_WAIT_MS : 0;
      let response;
      try {
        response = await this.relayFetch("poll", `direction=inbound&wait=${wait}&subscriber=${enc(this.subscriber)}`, {
          cache: "no-store",
          signal: this.abort.signal,
        });
      } catch {
        if (this.ended) return;
        trouble("the relay could not be reached");
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      if (response.status === 410) return this.end("gone");
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
        this.h.dropped("an unreadable poll answer");
        await sleep(backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
        continue;
      }
      backoff = 250;
      announced = true;
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
        if (response.status === 410) this.end("gone");
        else if (response.status === 401) this.end("unauthorized");
      } catch {
        // The receive leg reports an unreachable relay.
      }
    });
    return this.sendQueue;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
