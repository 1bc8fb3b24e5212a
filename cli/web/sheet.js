// The page's sheet and its MCP server: the same tools, revisions, stale-pin
// refusal and attributed change feed as the Rust demo surface
// (relay/src/surface/sheet.rs). Pure: no DOM, no network.

export const SHEET = "Sheet1";
export const PROTOCOL_VERSION = "2025-06-18";
const MAX_RANGE_CELLS = 10000;
const MAX_COL = 18278; // ZZZ
const MAX_ROW = 1048576;
// Most changes kept (oldest dropped). A feed asked for changes older than
// what is kept answers `complete: false`.
export const MAX_CHANGES = 10000;

export const DEFAULT_CELLS = [
  ["A1", "Item"], ["B1", "Qty"], ["C1", "Price"],
  ["A2", "Apples"], ["B2", "3"], ["C2", "0.50"],
  ["A3", "Pears"], ["B3", "5"], ["C3", "0.75"],
  ["A4", "Plums"], ["B4", "7"], ["C4", "1.20"],
];

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

// "B4" -> [row, col] (1-based), or null. Case-insensitive, spaces trimmed.
export function parseAddress(raw) {
  if (typeof raw !== "string") return null;
  const m = /^([A-Za-z]{1,3})([1-9][0-9]{0,6})$/.exec(raw.trim());
  if (!m) return null;
  let col = 0;
  for (const ch of m[1].toUpperCase()) col = col * 26 + (ch.charCodeAt(0) - 64);
  const row = Number(m[2]);
  return col <= MAX_COL && row >= 1 && row <= MAX_ROW ? [row, col] : null;
}

export function columnName(col) {
  let name = "";
  for (let c = col; c > 0; c = Math.floor((c - 1) / 26)) {
    name = String.fromCharCode(65 + ((c - 1) % 26)) + name;
  }
  return name;
}

export const formatAddress = (row, col) => columnName(col) + String(row);

const textResult = (text, structured) =>
  structured === undefined
    ? { content: [{ type: "text", text }] }
    : { content: [{ type: "text", text }], structuredContent: structured };

const failed = (message) => ({
  result: { content: [{ type: "text", text: message }], isError: true },
  outcome: { kind: "failed", message },
});

const rpcError = (code, message, data) =>
  data === undefined ? { code, message } : { code, message, data };

function schema(properties, required) {
  const s = { type: "object", properties };
  if (required.length) s.required = required;
  s.additionalProperties = false;
  return s;
}

// The tools, as `tools/list` answers them: the demo surface's own list.
export function toolDefinitions() {
  const sheet = { type: "string", description: "Sheet id; defaults to the active sheet." };
  const address = { type: "string", description: "A1 address, e.g. B4." };
  return [
    {
      name: "sheet_describe",
      description: "Describe the workbook: its sheets and how many cells each holds.",
      inputSchema: schema({}, []),
    },
    {
      name: "sheet_get_cell",
      description: "Read one cell by A1 address.",
      inputSchema: schema({ sheet, address }, ["address"]),
    },
    {
      name: "sheet_get_range",
      description: "Read a rectangular range of cells (values, row by row).",
      inputSchema: schema({
        sheet,
        start: { type: "string", description: "Top-left A1 address." },
        end: { type: "string", description: "Bottom-right A1 address." },
      }, ["start", "end"]),
    },
    {
      name: "sheet_set_cell",
      description: "Write one cell. A value starting with = is a formula; an empty value clears the cell.",
      inputSchema: schema({
        sheet,
        address,
        value: { type: "string", description: "The new value." },
      }, ["address", "value"]),
    },
    {
      name: "sheet_delete_row",
      description: "Delete a row; the rows below move up.",
      inputSchema: schema({
        sheet,
        row: { type: "integer", minimum: 1, description: "1-based row number." },
      }, ["row"]),
    },
    {
      name: "changes_since",
      description: "What changed on the sheet after a revision, and who changed it.",
      inputSchema: schema({
        since: { type: "string", description: "A revision this sheet returned, e.g. r3." },
      }, ["since"]),
    },
    {
      name: "sheet_confirm_edit",
      description: "Confirm a staged edit on the person's behalf.",
      inputSchema: schema({
        pendingId: { type: "string", description: "The staged edit's id." },
      }, ["pendingId"]),
    },
  ];
}

// The sheet and its MCP server. `onEvent` hears everything the page shows:
// {type: "change" | "call" | "notification" | "dropped", ...}.
export class SheetServer {
  constructor({ serverName = "human-plus-web-sheet", serverVersion = "0", cells = DEFAULT_CELLS, onEvent = () => {} } = {}) {
    this.serverName = serverName;
    this.serverVersion = serverVersion;
    this.onEvent = onEvent;
    this.cellMap = new Map(); // "row,col" -> value
    this.counter = 1;
    this.changes = []; // [{n, revision, handle, change, actor, kind, label}]
    this.firstKept = 1; // changes with n >= firstKept are all still kept
    for (const [a, v] of cells) {
      const key = parseAddress(a);
      if (key && v !== "") this.cellMap.set(key.join(","), v);
    }
  }

  revision() {
    return "r" + this.counter;
  }

  cell(address) {
    const key = parseAddress(address);
    return key ? this.cellMap.get(key.join(",")) : undefined;
  }

  // Every non-empty cell as [row, col, value].
  entries() {
    return [...this.cellMap].map(([k, v]) => {
      const [r, c] = k.split(",").map(Number);
      return [r, c, v];
    });
  }

  // ------------------------------------------------- kept across a reload

  // What a page keeps so that a reload of its tab carries on where it was:
  // every cell, the revision counter and the change history (the last
  // MAX_CHANGES changes), as plain JSON. Nothing else (the calls seen, who
  // is present) is part of what a revision means.
  snapshot() {
    return {
      counter: this.counter,
      firstKept: this.firstKept,
      cells: this.entries(),
      changes: this.changes.map((c) => [c.n, c.handle, c.change, c.actor, c.kind]),
    };
  }

  // The sheet a snapshot describes, with `options` as the constructor's.
  // Throws when anything in it is not what `snapshot` writes: a sheet
  // whose counter, history and cells do not agree must never answer under
  // the session it was kept for (a pin taken before could match another
  // sheet).
  static restore(snapshot, options = {}) {
    const bad = (what) => {
      throw new Error("the kept sheet is unreadable: " + what);
    };
    if (!isObject(snapshot)) bad("not an object");
    const { counter, firstKept, cells, changes } = snapshot;
    if (!Number.isSafeInteger(counter) || counter < 1) bad("counter");
    if (!Number.isSafeInteger(firstKept) || firstKept < 1) bad("firstKept");
    if (!Array.isArray(cells) || !Array.isArray(changes)) bad("cells or changes");
    if (changes.length > MAX_CHANGES) bad("too many changes");
    const sheet = new SheetServer({ ...options, cells: [] });
    for (const entry of cells) {
      if (!Array.isArray(entry) || entry.length !== 3) bad("a cell");
      const [r, c, v] = entry;
      if (!Number.isSafeInteger(r) || r < 1 || r > MAX_ROW) bad("a row");
      if (!Number.isSafeInteger(c) || c < 1 || c > MAX_COL) bad("a column");
      if (typeof v !== "string" || v === "") bad("a value");
      const key = `${r},${c}`;
      if (sheet.cellMap.has(key)) bad("a cell twice");
      sheet.cellMap.set(key, v);
    }
    if (changes.length === 0) {
      // Nothing ever changed: the first revision.
      if (counter !== 1 || firstKept !== 1) bad("a counter without changes");
    } else {
      const first = Array.isArray(changes[0]) ? changes[0][0] : null;
      if (!Number.isSafeInteger(first) || first < 2) bad("the first change");
      // Either every change since r1 is kept, or the oldest were dropped
      // at the bound and `firstKept` says where the history starts.
      if (first === 2 ? firstKept !== 1 : firstKept !== first || changes.length !== MAX_CHANGES) bad("firstKept");
      changes.forEach((entry, i) => {
        if (!Array.isArray(entry) || entry.length !== 5) bad("a change");
        const [n, handle, change, actor, kind] = entry;
        if (n !== first + i) bad("the changes' order");
        if (!["created", "updated", "deleted"].includes(change)) bad("a change's kind");
        if (actor !== "human" && actor !== "agent") bad("a change's actor");
        let label;
        if (kind === "cell") {
          const key = parseAddress(handle);
          if (!key || formatAddress(key[0], key[1]) !== handle) bad("a change's cell");
          label = `${SHEET}!${handle}`;
        } else if (kind === "row") {
          const m = typeof handle === "string" ? /^row:([1-9][0-9]{0,6})$/.exec(handle) : null;
          if (!m || change !== "deleted") bad("a change's row");
          label = `${SHEET} row ${m[1]}`;
        } else {
          bad("a change's target");
        }
        sheet.changes.push({ n, revision: "r" + n, handle, change, actor, kind, label });
      });
      if (changes[changes.length - 1][0] !== counter) bad("the counter");
    }
    sheet.counter = counter;
    sheet.firstKept = firstKept;
    return sheet;
  }

  // ------------------------------------------------------------- writes

  setCell(actor, address, value) {
    const key = parseAddress(address);
    if (!key) throw new Error("invalid cell address: " + address);
    const k = key.join(",");
    const had = this.cellMap.has(k);
    if (value === "") this.cellMap.delete(k);
    else this.cellMap.set(k, value);
    const change = value === "" ? "deleted" : had ? "updated" : "created";
    const handle = formatAddress(key[0], key[1]);
    return this.recordChange(actor, handle, change, "cell", `${SHEET}!${handle}`, value);
  }

  deleteRow(actor, row) {
    if (!Number.isInteger(row) || row < 1 || row > MAX_ROW) throw new Error("invalid row: " + row);
    const next = new Map();
    for (const [k, v] of this.cellMap) {
      const [r, c] = k.split(",").map(Number);
      if (r < row) next.set(k, v);
      else if (r > row) next.set(`${r - 1},${c}`, v);
    }
    this.cellMap = next;
    return this.recordChange(actor, `row:${row}`, "deleted", "row", `${SHEET} row ${row}`, null);
  }

  recordChange(actor, handle, change, kind, label, value) {
    this.counter += 1;
    const revision = this.revision();
    const entry = { n: this.counter, revision, handle, change, actor, kind, label };
    this.changes.push(entry);
    if (this.changes.length > MAX_CHANGES) {
      this.changes.shift();
      this.firstKept = this.changes[0].n;
    }
    this.onEvent({ type: "change", ...entry, value });
    return revision;
  }

  // ---------------------------------------------------------------- MCP

  // One inbound frame (the raw text); returns the reply object to post, or
  // null. Never throws on any input.
  handleFrame(raw) {
    let frame;
    try {
      frame = JSON.parse(raw);
    } catch {
      this.onEvent({ type: "dropped", reason: "not JSON" });
      return null;
    }
    if (!isObject(frame)) {
      // A batch or a bare value: MicroMcpServer ignores both.
      this.onEvent({ type: "dropped", reason: Array.isArray(frame) ? "a batch" : "not an object" });
      return null;
    }
    if (typeof frame.method !== "string") {
      // A response (or nonsense): nothing to answer.
      this.onEvent({ type: "dropped", reason: "not a request" });
      return null;
    }
    const method = frame.method;
    const params = frame.params === undefined ? null : frame.params;
    const hasId = Object.prototype.hasOwnProperty.call(frame, "id") && frame.id !== null;
    if (!hasId) {
      this.onEvent({ type: "notification", method, params });
      return null;
    }
    let outcome;
    try {
      switch (method) {
        case "initialize":
          outcome = { result: this.initialize() };
          break;
        case "ping":
          outcome = { result: {} };
          break;
        case "tools/list":
          outcome = { result: { tools: toolDefinitions() } };
          break;
        case "tools/call":
          outcome = this.toolsCall(params);
          break;
        default:
          outcome = { error: rpcError(-32601, "Unsupported method: " + method) };
      }
    } catch (e) {
      outcome = { error: rpcError(-32603, "Internal error") };
      this.onEvent({ type: "dropped", reason: "internal error: " + (e && e.message) });
    }
    return outcome.error
      ? { jsonrpc: "2.0", id: frame.id, error: outcome.error }
      : { jsonrpc: "2.0", id: frame.id, result: outcome.result };
  }

  initialize() {
    return {
      protocolVersion: PROTOCOL_VERSION,
      capabilities: { tools: { listChanged: true } },
      serverInfo: { name: this.serverName, version: this.serverVersion, title: "Human+ web sheet" },
      instructions: "A small spreadsheet a person has open in a browser. Read before you write; every result carries _meta.revision; pin writes to it.",
    };
  }

  toolsCall(params) {
    const name = isObject(params) && typeof params.name === "string" ? params.name : null;
    if (name === null) return { error: rpcError(-32602, "tools/call requires `name`") };
    const args = isObject(params.arguments) ? params.arguments : {};
    const meta = isObject(params._meta) ? params._meta : {};
    const pinned = meta.revision === undefined || meta.revision === null ? null : meta.revision;
    const record = { type: "call", tool: name, arguments: args, pinned };
    if (!toolDefinitions().some((t) => t.name === name)) {
      const message = "Unknown tool: " + name;
      this.onEvent({ ...record, outcome: { kind: "failed", message } });
      return { error: rpcError(-32601, message) };
    }
    const current = this.revision();
    if (name !== "changes_since" && pinned !== null && pinned !== current) {
      const shown = typeof pinned === "string" ? pinned : JSON.stringify(pinned);
      this.onEvent({ ...record, outcome: { kind: "refused", current } });
      return {
        error: rpcError(
          409,
          `Revision mismatch: the sheet is at ${current}, this call was pinned to ${shown}. Nothing was applied; read the sheet again before writing.`,
          { code: "revision_mismatch", current, pinned },
        ),
      };
    }
    const { result, outcome } = this.runTool(name, args);
    result._meta = { ...(isObject(result._meta) ? result._meta : {}), revision: this.revision() };
    this.onEvent({ ...record, outcome, revision: this.revision() });
    return { result };
  }

  runTool(name, args) {
    if (typeof args.sheet === "string" && args.sheet !== SHEET) return failed("Unknown sheet: " + args.sheet);
    switch (name) {
      case "sheet_describe":
        return { result: this.describe(), outcome: { kind: "read" } };
      case "sheet_get_cell":
        return this.getCell(args);
      case "sheet_get_range":
        return this.getRange(args);
      case "sheet_set_cell":
        return this.toolSetCell(args);
      case "sheet_delete_row":
        return this.toolDeleteRow(args);
      case "changes_since":
        return this.changesSince(args);
      case "sheet_confirm_edit":
        return failed("No pending edit with that id: nothing was confirmed.");
      default:
        return failed("Unknown tool: " + name);
    }
  }

  describe() {
    const count = this.cellMap.size;
    const columns = this.entries().reduce((m, [, c]) => Math.max(m, c), 0);
    return textResult(`Active: ${SHEET}\n${SHEET}: ${count} cells, ${columns} columns`, {
      activeSheetId: SHEET,
      sheets: [{ id: SHEET, name: SHEET, cellCount: count, columnCount: columns, frozenRows: 0, frozenCols: 0 }],
    });
  }

  getCell(args) {
    const key = parseAddress(args.address);
    if (!key) return failed("`address` must be an A1 address such as B4.");
    const address = formatAddress(key[0], key[1]);
    const v = this.cellMap.get(key.join(","));
    return v === undefined
      ? { result: textResult("(empty)", { sheet: SHEET, address, value: null }), outcome: { kind: "read" } }
      : { result: textResult(v, { sheet: SHEET, address, value: v }), outcome: { kind: "read" } };
  }

  getRange(args) {
    const a = parseAddress(args.start);
    const b = parseAddress(args.end);
    if (!a || !b) return failed("`start` and `end` must be A1 addresses such as A1 and C4.");
    const [r0, r1] = [Math.min(a[0], b[0]), Math.max(a[0], b[0])];
    const [c0, c1] = [Math.min(a[1], b[1]), Math.max(a[1], b[1])];
    if ((r1 - r0 + 1) * (c1 - c0 + 1) > MAX_RANGE_CELLS) {
      return failed(`Range too large: at most ${MAX_RANGE_CELLS} cells.`);
    }
    const values = [];
    const lines = [];
    for (let r = r0; r <= r1; r++) {
      const row = [];
      for (let c = c0; c <= c1; c++) {
        const v = this.cellMap.get(`${r},${c}`);
        row.push(v === undefined ? null : v);
      }
      lines.push(row.map((v) => (v === null ? "" : v)).join("\t"));
      values.push(row);
    }
    const start = formatAddress(r0, c0);
    const end = formatAddress(r1, c1);
    return { result: textResult(lines.join("\n"), { sheet: SHEET, start, end, values }), outcome: { kind: "read" } };
  }

  toolSetCell(args) {
    if (typeof args.address !== "string") return failed("`address` must be an A1 address such as B4.");
    let value;
    const v = args.value;
    if (typeof v === "string") value = v;
    else if (v === null || v === undefined) value = "";
    else if (typeof v === "number" || typeof v === "boolean") value = String(v);
    else return failed("`value` must be a string or a number.");
    const key = parseAddress(args.address);
    if (!key) return failed("`address` must be an A1 address such as B4.");
    this.setCell("agent", args.address, value);
    const address = formatAddress(key[0], key[1]);
    return {
      result: textResult(`${SHEET}!${address} = ${value}`, { sheet: SHEET, address, value }),
      outcome: { kind: "written", handle: address },
    };
  }

  toolDeleteRow(args) {
    let row = null;
    if (typeof args.row === "number") row = args.row;
    else if (typeof args.row === "string" && /^\s*[0-9]+\s*$/.test(args.row)) row = Number(args.row.trim());
    if (!Number.isInteger(row) || row < 1 || row > MAX_ROW) return failed("`row` must be a row number, 1 or more.");
    this.deleteRow("agent", row);
    return {
      result: textResult(`Deleted row ${row} of ${SHEET}`, { sheet: SHEET, row }),
      outcome: { kind: "written", handle: `row:${row}` },
    };
  }

  changesSince(args) {
    let since = null;
    const s = args.since;
    if (s === undefined || s === null) since = 0;
    else if (typeof s === "string") {
      const t = s.trim();
      const digits = t.startsWith("r") ? t.slice(1) : t;
      if (/^[0-9]+$/.test(digits)) since = Number(digits);
    } else if (typeof s === "number" && Number.isInteger(s) && s >= 0) since = s;
    if (since === null || since > this.counter) {
      return failed("Unknown revision: pass a revision this sheet returned, such as r3.");
    }
    const rows = this.changes.filter((c) => c.n > since);
    // Honest completeness: every change after `since` must still be kept.
    const complete = since + 1 >= this.firstKept;
    const text = rows.length === 0
      ? `No changes since r${since}.`
      : [`${rows.length} change(s) since r${since}:`, ...rows.map((c) => `${c.handle} ${c.change} by ${c.actor} (${c.revision})`)].join("\n");
    return {
      result: {
        content: [{ type: "text", text }],
        _meta: {
          complete,
          changes: rows.map((c) => ({
            handle: c.handle, change: c.change, actor_type: c.actor, kind: c.kind, label: c.label, revision: c.revision,
          })),
        },
      },
      outcome: { kind: "read" },
    };
  }
}
