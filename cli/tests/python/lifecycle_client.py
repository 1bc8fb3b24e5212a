"""A bridge that follows its profile, driven by the official Python MCP SDK.

Run by `cli/tests/mcp_python.rs`, which owns the relay, the pages and the
profile: this script starts `human-plus mcp --profile NAME` (the command in
HUMAN_PLUS_BRIDGE, a JSON list, with HUMAN_PLUS_CONFIG_DIR) once, and asks
the test to close the page and then to join a new link under the same name
(`{"ask": ...}` lines on stdout, one line of answer on stdin). The same
bridge process must serve the new session: every check is made here, and
the script exits non-zero with the reason when one fails.
"""

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

STEP = 120


def ask(what):
    print(json.dumps({"ask": what}), flush=True)
    answer = sys.stdin.readline().strip()
    if answer != "done":
        raise SystemExit(f"the test answered {answer!r} to {what}")


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def meta(result, key):
    return (result.meta or {}).get(key)


def check(ok, why):
    if not ok:
        raise AssertionError(why)


def server():
    command = json.loads(os.environ["HUMAN_PLUS_BRIDGE"])
    env = {
        "HUMAN_PLUS_CONFIG_DIR": os.environ["HUMAN_PLUS_CONFIG_DIR"],
        "PATH": os.environ.get("PATH", ""),
    }
    return StdioServerParameters(command=command[0], args=command[1:], env=env)


async def main():
    name = os.environ["HUMAN_PLUS_PROFILE"]
    async with Client(server(), mode="auto") as client:

        async def call(tool, args):
            with anyio.fail_after(STEP):
                return await client.call_tool(tool, args)

        listed = [t.name for t in (await client.list_tools()).tools]
        check("sheet_get_cell" in listed, f"listed {listed}")
        read = await call("sheet_get_cell", {"address": "B4"})
        check(not read.is_error, text(read))

        ask("close_page")
        gone = await call("sheet_get_cell", {"address": "B4"})
        t = text(gone)
        check(gone.is_error, t)
        check(meta(gone, "code") == "surface_unavailable", gone.meta)
        check(f"human-plus join --name {name}" in t, t)

        ask("new_link")
        with anyio.fail_after(STEP):
            while True:
                back = await client.call_tool("sheet_get_cell", {"address": "B4"})
                if not back.is_error:
                    break
                await anyio.sleep(0.3)
        t = text(back)
        check(t.startswith("<human-plus-note>The connection to this surface moved to a new session"), t)
        check(meta(back, "rejoined") == "new_session", back.meta)
        again = await call("sheet_get_cell", {"address": "B4"})
        check(not again.is_error and "<human-plus-note>" not in text(again), text(again))
    print(json.dumps({"passed": "lifecycle"}), flush=True)


if __name__ == "__main__":
    try:
        anyio.run(main)
    except Exception as e:  # noqa: BLE001 - the reason goes to the test
        print(f"lifecycle failed: {e!r}", file=sys.stderr)
        sys.exit(1)
