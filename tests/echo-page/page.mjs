// Seed 004's page, wired as a Laravel app's page is: laravel-echo +
// pusher-js (pinned in package.json) joined to the session's private
// channel through the host app's auth bridge, answering MCP over whispers
// as a small Human+ surface (a few cells, revisions r1, r2, … on every
// result, a stale pin refused with a 409, an attributed change feed).
//
//   HUMAN_PLUS_TOKEN=… node page.mjs --ws ws://127.0.0.1:PORT/app/KEY \
//       --auth http://127.0.0.1:PORT/broadcasting/auth --session ID
//
// Options:
//   --broadcaster reverb|pusher   Echo's broadcaster (default reverb)
//   --channel NAME                the channel (default private-agent.session.ID);
//                                 presence-… joins it as a presence channel
//   --auth-mode endpoint|authorizer
//                                 endpoint (default): pusher-js POSTs the form
//                                 itself to authEndpoint with the bearer header;
//                                 authorizer: a custom authorizer POSTs JSON
//   --tool-names short|sheet      short (default): read_cell, set_cell,
//                                 changes_since; sheet: the Rust demo
//                                 surface's sheet_get_cell, sheet_set_cell,
//                                 changes_since
//
// The token comes from the environment (HUMAN_PLUS_TOKEN), never argv, and
// goes only to the auth bridge as `Authorization: Bearer …`.
//
// Stdout: one JSON object per line, per event: {"event":"ready",…} once
// subscribed, "request" (every request received), "notification", "write"
// (an applied agent write), "refused" (a stale pin), "reply" (every
// whisper sent), "person_edit", "state", "server_error" (a pusher:error,
// e.g. 4301 for a reply over the payload cap), "subscription_error",
// "connection" (state changes), "left". Diagnostics go to stderr.
//
// Stdin: one JSON command per line:
//   {"person_edit":{"cell":"A1","value":"x"}}  the person edits a cell: the
//       revision moves, the change is the person's, and every agent hears
//       notifications/agent_activity with source "user"
//   {"pad":N}            every later tool result carries N more bytes of text
//                        (0 stops it): a reply over the channel's limits
//   {"silent":true|false} receive requests but answer none (or again)
//   {"tools_changed":true} whisper notifications/tools/list_changed
//   {"state":true}       print the cells and revision
//   {"leave":true}       leave the channel, disconnect, exit 0 (also on EOF)

import Echo from "laravel-echo";
import Pusher from "pusher-js";
import readline from "node:readline";

// ------------------------------------------------------------ arguments

function parseArgs(argv) {
    const out = {
        broadcaster: "reverb",
        authMode: "endpoint",
        toolNames: "short",
    };
    const names = {
        "--ws": "ws",
        "--auth": "auth",
        "--session": "session",
        "--channel": "channel",
        "--broadcaster": "broadcaster",
        "--auth-mode": "authMode",
        "--tool-names": "toolNames",
    };
    for (let i = 0; i < argv.length; i += 2) {
        const key = names[argv[i]];
        if (!key || argv[i + 1] === undefined) {
            fail(`unknown or incomplete argument: ${argv[i]}`);
        }
        out[key] = argv[i + 1];
    }
    for (const needed of ["ws", "auth", "session"]) {
        if (!out[needed]) fail(`--${needed} is required`);
    }
    if (!["reverb", "pusher"].includes(out.broadcaster)) fail("--broadcaster: reverb or pusher");
    if (!["endpoint", "authorizer"].includes(out.authMode)) fail("--auth-mode: endpoint or authorizer");
    if (!["short", "sheet"].includes(out.toolNames)) fail("--tool-names: short or sheet");
    return out;
}

function fail(message) {
    process.stderr.write(`page.mjs: ${message}\n`);
    process.exit(2);
}

function emit(event, fields = {}) {
    process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

const args = parseArgs(process.argv.slice(2));
const token = process.env.HUMAN_PLUS_TOKEN ?? "";
if (!token) fail("HUMAN_PLUS_TOKEN is not set");

// ws(s)://host:port[/prefix]/app/KEY
const ws = new URL(args.ws);
const tls = ws.protocol === "wss:";
if (!tls && ws.protocol !== "ws:") fail("--ws must be a ws:// or wss:// URL");
const match = ws.pathname.match(/^(.*)\/app\/([^/]+)$/);
if (!match) fail("--ws must end in /app/APP_KEY");
const [, wsPath, key] = match;
const port = Number(ws.port || (tls ? 443 : 80));

// ------------------------------------------------------------ the sheet

const TOOLS = args.toolNames === "sheet"
    ? { read: "sheet_get_cell", write: "sheet_set_cell", feed: "changes_since" }
    : { read: "read_cell", write: "set_cell", feed: "changes_since" };
const SHEET = "Sheet1";
const PROTOCOL_VERSION = "2025-06-18";

const cells = new Map([
    ["A1", "Item"], ["B1", "Qty"], ["C1", "Price"],
    ["A2", "Apples"], ["B2", "3"], ["C2", "0.50"],
    ["A3", "Pears"], ["B3", "5"], ["C3", "0.75"],
    ["A4", "Plums"], ["B4", "7"], ["C4", "1.20"],
]);
let counter = 1;
const changes = []; // {n, handle, change, actor_type, kind, label, revision}
let padding = 0;
let silent = false;

const revision = () => `r${counter}`;

// An A1 address, normalised (upper case), or null.
function address(raw) {
    if (typeof raw !== "string") return null;
    const m = raw.trim().match(/^([A-Za-z]{1,3})([1-9][0-9]{0,6})$/);
    return m ? m[1].toUpperCase() + m[2] : null;
}

function setCell(actor, cell, value) {
    const before = cells.has(cell);
    if (value === "") cells.delete(cell);
    else cells.set(cell, value);
    const change = value === "" ? "deleted" : before ? "updated" : "created";
    counter += 1;
    changes.push({
        n: counter,
        handle: cell,
        change,
        actor_type: actor,
        kind: "cell",
        label: `${SHEET}!${cell}`,
        revision: revision(),
    });
    return revision();
}

function textResult(text, structured) {
    const result = { content: [{ type: "text", text }] };
    if (structured) result.structuredContent = structured;
    return result;
}

function failed(message) {
    return { content: [{ type: "text", text: message }], isError: true };
}

function schema(properties, required) {
    return { type: "object", properties, required, additionalProperties: false };
}

function toolDefinitions() {
    const sheet = { type: "string", description: "Sheet id; defaults to the active sheet." };
    const a1 = { type: "string", description: "A1 address, e.g. B4." };
    return [
        {
            name: TOOLS.read,
            description: "Read one cell by A1 address.",
            inputSchema: schema({ sheet, address: a1 }, ["address"]),
        },
        {
            name: TOOLS.write,
            description: "Write one cell. An empty value clears the cell.",
            inputSchema: schema(
                { sheet, address: a1, value: { type: "string", description: "The new value." } },
                ["address", "value"],
            ),
        },
        {
            name: TOOLS.feed,
            description: "What changed on the sheet after a revision, and who changed it.",
            inputSchema: schema(
                { since: { type: "string", description: "A revision this sheet returned, e.g. r3." } },
                ["since"],
            ),
        },
    ];
}

function runTool(name, a) {
    if (a.sheet !== undefined && a.sheet !== SHEET) return failed(`Unknown sheet: ${a.sheet}`);
    if (name === TOOLS.read) {
        const cell = address(a.address);
        if (!cell) return failed("`address` must be an A1 address such as B4.");
        const value = cells.get(cell);
        return textResult(value ?? "(empty)", { sheet: SHEET, address: cell, value: value ?? null });
    }
    if (name === TOOLS.write) {
        const cell = address(a.address);
        if (!cell) return failed("`address` must be an A1 address such as B4.");
        let value = a.value;
        if (value === null || value === undefined) value = "";
        else if (typeof value === "number" || typeof value === "boolean") value = String(value);
        else if (typeof value !== "string") return failed("`value` must be a string or a number.");
        const now = setCell("agent", cell, value);
        emit("write", { tool: name, address: cell, value, revision: now, actor: "agent" });
        return textResult(`${SHEET}!${cell} = ${value}`, { sheet: SHEET, address: cell, value });
    }
    // the change feed
    let since = a.since;
    if (since === undefined || since === null) since = 0;
    else if (typeof since === "string") since = Number(since.trim().replace(/^r/, ""));
    if (!Number.isInteger(since) || since < 0 || since > counter) {
        return failed("Unknown revision: pass a revision this sheet returned, such as r3.");
    }
    const rows = changes
        .filter((c) => c.n > since)
        .map(({ handle, change, actor_type, kind, label, revision }) =>
            ({ handle, change, actor_type, kind, label, revision }));
    const text = rows.length === 0
        ? `No changes since r${since}.`
        : [`${rows.length} change(s) since r${since}:`,
            ...rows.map((c) => `${c.handle} ${c.change} by ${c.actor_type} (${c.revision})`)].join("\n");
    return { content: [{ type: "text", text }], _meta: { complete: true, changes: rows } };
}

function rpcError(code, message, data) {
    const error = { code, message };
    if (data !== undefined) error.data = data;
    return error;
}

function toolsCall(params) {
    const name = params?.name;
    if (typeof name !== "string") return { error: rpcError(-32602, "tools/call requires `name`") };
    const a = params.arguments && typeof params.arguments === "object" && !Array.isArray(params.arguments)
        ? params.arguments
        : {};
    const pin = params._meta?.revision ?? null;
    if (!Object.values(TOOLS).includes(name)) return { error: rpcError(-32601, `Unknown tool: ${name}`) };
    const current = revision();
    if (name !== TOOLS.feed && pin !== null && pin !== current) {
        const shown = typeof pin === "string" ? pin : JSON.stringify(pin);
        emit("refused", { tool: name, pinned: pin, current });
        return {
            error: rpcError(
                409,
                `Revision mismatch: the sheet is at ${current}, this call was pinned to ${shown}. Nothing was applied; read the sheet again before writing.`,
                { code: "revision_mismatch", current, pinned: pin },
            ),
        };
    }
    const result = runTool(name, a);
    if (padding > 0) result.content.push({ type: "text", text: "x".repeat(padding) });
    result._meta = { ...(result._meta ?? {}), revision: revision() };
    return { result };
}

// One request frame -> its answer (null for a notification or a non-request).
function handle(frame) {
    if (frame === null || typeof frame !== "object" || Array.isArray(frame)) return null;
    const { method, id, params } = frame;
    if (typeof method !== "string") return null; // a reply (another agent's view): not ours
    if (id === undefined || id === null) {
        emit("notification", { method, params: params ?? null });
        return null;
    }
    const fields = { method, id };
    if (method === "tools/call") {
        fields.tool = params?.name ?? null;
        fields.pinned = params?._meta?.revision ?? null;
    }
    emit("request", fields);
    let outcome;
    switch (method) {
        case "initialize": {
            const asked = params?.protocolVersion;
            outcome = {
                result: {
                    protocolVersion: typeof asked === "string" ? asked : PROTOCOL_VERSION,
                    capabilities: { tools: { listChanged: true } },
                    serverInfo: { name: "human-plus-echo-page", version: "0.0.0", title: "Human+ Echo page" },
                    instructions: "A small spreadsheet a person has open. Read before you write; every result carries _meta.revision; pin writes to it.",
                },
            };
            break;
        }
        case "ping":
            outcome = { result: {} };
            break;
        case "tools/list":
            outcome = { result: { tools: toolDefinitions() } };
            break;
        case "tools/call":
            outcome = toolsCall(params);
            break;
        default:
            outcome = { error: rpcError(-32601, `Unsupported method: ${method}`) };
    }
    return { jsonrpc: "2.0", id, ...outcome };
}

// ------------------------------------------------------------ the channel

const headers = { Authorization: `Bearer ${token}` };
const options = {
    broadcaster: args.broadcaster,
    key,
    wsHost: ws.hostname,
    wsPort: port,
    wssPort: port,
    forceTLS: tls,
    enabledTransports: tls ? ["wss"] : ["ws"],
    disableStats: true,
    Pusher,
};
if (wsPath) options.wsPath = wsPath;
if (args.broadcaster === "pusher") options.cluster = "mt1"; // pusher-js requires one; wsHost wins
if (args.authMode === "endpoint") {
    options.authEndpoint = args.auth;
    options.auth = { headers };
} else {
    // A custom authorizer: the bridge's JSON form.
    options.authorizer = (channel) => ({
        authorize: (socketId, callback) => {
            fetch(args.auth, {
                method: "POST",
                headers: { ...headers, "Content-Type": "application/json", Accept: "application/json" },
                body: JSON.stringify({ socket_id: socketId, channel_name: channel.name }),
            })
                .then(async (response) => {
                    const body = await response.text();
                    if (!response.ok) {
                        callback(new Error(`auth bridge answered ${response.status}: ${body}`), null);
                        return;
                    }
                    callback(null, JSON.parse(body));
                })
                .catch((error) => callback(error, null));
        },
    });
}

const echo = new Echo(options);
const pusher = echo.connector.pusher;

pusher.connection.bind("state_change", ({ previous, current }) => {
    emit("connection", { previous, current });
});
pusher.connection.bind("error", (error) => {
    const data = error?.data ?? error?.error?.data ?? null;
    if (data && typeof data === "object" && "code" in data) {
        emit("server_error", { code: data.code ?? null, message: data.message ?? null });
    } else {
        emit("connection_error", { type: error?.type ?? null, message: String(error?.error?.message ?? error?.message ?? "") });
    }
});

const requested = args.channel ?? `private-agent.session.${args.session}`;
let channel;
if (requested.startsWith("presence-")) {
    channel = echo.join(requested.slice("presence-".length));
} else if (requested.startsWith("private-")) {
    channel = echo.private(requested.slice("private-".length));
} else {
    fail("--channel must be a private- or presence- channel");
}
const channelName = requested;

// Whispers out: every reply and notification the page sends. A refused
// whisper (over the payload cap, the rate) comes back as pusher:error.
function whisper(frame, about) {
    const text = JSON.stringify(frame);
    channel.whisper("mcp", frame);
    emit("reply", { ...about, bytes: Buffer.byteLength(text) });
}

channel.subscribed(() => {
    emit("ready", {
        channel: channelName,
        socket_id: pusher.connection.socket_id,
        revision: revision(),
        tools: Object.values(TOOLS),
    });
});
channel.error((error) => {
    emit("subscription_error", {
        status: error?.status ?? null,
        type: error?.type ?? null,
        message: String(error?.error ?? error?.message ?? JSON.stringify(error)),
    });
});

channel.listenForWhisper("mcp", (frame) => {
    const answer = handle(frame);
    if (answer && !silent) {
        whisper(answer, { id: answer.id, kind: answer.error ? "error" : "result" });
    }
});

// ------------------------------------------------------------ commands

let leaving = false;
function leave(code = 0) {
    if (leaving) return;
    leaving = true;
    try {
        echo.leaveChannel(channelName);
        echo.disconnect();
    } catch (error) {
        process.stderr.write(`page.mjs: leaving: ${error}\n`);
    }
    emit("left");
    // Let the unsubscribe and the close go out.
    setTimeout(() => process.exit(code), 100);
}

function command(line) {
    let cmd;
    try {
        cmd = JSON.parse(line);
    } catch {
        emit("command_error", { message: "not JSON" });
        return;
    }
    if (cmd.person_edit) {
        const cell = address(cmd.person_edit.cell);
        const value = String(cmd.person_edit.value ?? "");
        if (!cell) {
            emit("command_error", { message: "person_edit: bad cell" });
            return;
        }
        const now = setCell("human", cell, value);
        emit("person_edit", { cell, value, revision: now });
        whisper({
            jsonrpc: "2.0",
            method: "notifications/agent_activity",
            params: {
                source: "user",
                agentId: "person",
                agentName: "A person",
                target: { kind: "cell", elementId: cell, label: cell },
                action: "editing",
                timestamp: Date.now(),
            },
        }, { method: "notifications/agent_activity" });
    } else if (typeof cmd.pad === "number") {
        padding = Math.max(0, Math.floor(cmd.pad));
        emit("pad", { bytes: padding });
    } else if (typeof cmd.silent === "boolean") {
        silent = cmd.silent;
        emit("silent", { silent });
    } else if (cmd.tools_changed) {
        whisper({ jsonrpc: "2.0", method: "notifications/tools/list_changed" },
            { method: "notifications/tools/list_changed" });
    } else if (cmd.state) {
        emit("state", { revision: revision(), cells: Object.fromEntries(cells) });
    } else if (cmd.leave) {
        leave(0);
    } else {
        emit("command_error", { message: "unknown command" });
    }
}

const input = readline.createInterface({ input: process.stdin });
input.on("line", (line) => {
    if (line.trim()) command(line);
});
input.on("close", () => leave(0));
process.on("SIGTERM", () => leave(0));
