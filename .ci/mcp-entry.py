"""Starts one MCP server entry of a client's configuration file as the
client does, and checks that it answers `tools/list`.

    python .ci/mcp-entry.py [--within SECONDS] CONFIG.json NAME TOOL...

The entry's command, arguments and environment are used as written; the
rest of the environment is this process's, filtered as the official Python
MCP SDK (this client) and Claude Desktop filter it (HOME, LOGNAME, PATH,
SHELL, TERM, USER): run it with the PATH a client started from the desktop
has. It prints the entry, the tools and the time from the start to the
answer, and exits 1 unless every TOOL is listed (within SECONDS, default
180). Run by `.ci/package`
with the interpreter of `.ci/python-mcp`'s environment.
"""

import json
import sys
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def main():
    argv = sys.argv[1:]
    within = 180.0
    if argv[:1] == ["--within"]:
        within, argv = float(argv[1]), argv[2:]
    path, name, *want = argv
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    servers = config.get("mcpServers", config.get("servers", {}))
    entry = servers[name]
    print(f"entry {name}: {json.dumps(entry)}", flush=True)
    params = StdioServerParameters(
        command=entry["command"], args=entry.get("args", []), env=entry.get("env")
    )

    async def run():
        start = time.monotonic()
        with anyio.fail_after(within):
            async with Client(params) as client:
                listed = await client.list_tools()
        return [t.name for t in listed.tools], time.monotonic() - start

    names, took = anyio.run(run)
    print(f"tools/list answered in {took:.2f} s: {', '.join(names)}", flush=True)
    missing = [t for t in want if t not in names]
    if missing:
        print(f"missing: {missing}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
