"""The `human-plus mcp` bridge driven by the official Python MCP SDK.

Run by `cli/tests/mcp_python.rs`, which owns the relay and the demo sheet:
this script starts the bridge over stdio (the command in HUMAN_PLUS_BRIDGE,
a JSON list), speaks MCP at the version in MCP_VERSION, and asks the test
for what happens on the surface by writing `{"ask": ...}` lines to stdout
and reading one line of answer from stdin. It checks every answer itself
and exits non-zero (with the reason) when one is wrong.

Versions 2024-11-05 to 2025-11-25 use the `initialize` handshake (the SDK's
session, offered exactly that version); 2026-07-28 uses the SDK's `Client`
in `auto` mode (`server/discover`) and a `subscriptions/listen` stream.
"""

import json
import os
import sys

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

STEP = 120


def ask(what):
    """Asks the test to act on the surface; returns when it has."""
    print(json.dumps({"ask": what}), flush=True)
    answer = sys.stdin.readline().strip()
    if answer != "done":
        raise SystemExit(f"the test answered {answer!r} to {what}")


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def meta(result, key):
    m = result.meta or {}
    return m.get(key)


def check(ok, why):
    if not ok:
        raise AssertionError(why)


class Changes:
    """Counts list changes, however they reach this client."""

    def __init__(self):
        self.count = 0
        self.event = anyio.Event()

    def seen(self):
        self.count += 1
        self.event.set()

    async def next(self, seen_before):
        with anyio.fail_after(STEP):
            while self.count <= seen_before:
                self.event = anyio.Event()
                await self.event.wait()


async def story(session, changes, list_tools, call_tool):
    listed = [t.name for t in (await list_tools()).tools]
    check(listed == ["sheet_get_cell", "sheet_set_cell", "changes_since"], f"listed {listed}")

    read = await call_tool("sheet_get_cell", {"address": "B4"})
    check(not read.is_error, text(read))
    check("<untrusted-tool-output" in text(read) and "\n7\n" in text(read), text(read))
    check("<human-plus-note>" not in text(read), text(read))

    ask("person_edit")
    stale = await call_tool("sheet_set_cell", {"address": "B4", "value": "8"})
    t = text(stale)
    check(stale.is_error, t)
    check(t.startswith("<human-plus-note>A person has been active on this surface"), t)
    check("so `sheet_set_cell` was NOT applied." in t, t)
    check("Do not simply repeat `sheet_set_cell`" in t, t)
    check(meta(stale, "code") == "surface_changed_under_you", stale.meta)
    check(meta(stale, "personActive") is True, stale.meta)

    feed = await call_tool("changes_since", {"since": "r1"})
    check(not feed.is_error and "- B4 (updated by human)" in text(feed), text(feed))
    check("<human-plus-note>" not in text(feed), text(feed))

    reread = await call_tool("sheet_get_cell", {"address": "B4"})
    check("\n12\n" in text(reread), text(reread))
    write = await call_tool("sheet_set_cell", {"address": "D4", "value": "14.40"})
    check(not write.is_error, text(write))
    check(isinstance(meta(write, "revision"), str), write.meta)

    confirm = await call_tool("sheet_confirm_edit", {"pendingId": "p1"})
    check(confirm.is_error and text(confirm).startswith("tool_refused:"), text(confirm))
    check(meta(confirm, "code") == "tool_refused", confirm.meta)

    seen = changes.count
    ask("add_tool")
    await changes.next(seen)
    listed = [t.name for t in (await list_tools()).tools]
    check(listed == ["sheet_get_cell", "sheet_set_cell", "changes_since", "sheet_note"], f"listed {listed}")

    seen = changes.count
    ask("redefine_pinned_tool")
    await changes.next(seen)
    listed = [t.name for t in (await list_tools()).tools]
    check(listed == ["sheet_get_cell", "changes_since", "sheet_note"], f"listed {listed}")
    refused = await call_tool("sheet_set_cell", {"address": "D5", "value": "1"})
    check(refused.is_error, text(refused))
    check("Human+ tool definition pin changed for [sheet_set_cell]." in text(refused), text(refused))
    check(meta(refused, "code") == "tool_refused", refused.meta)
    still = await call_tool("sheet_get_cell", {"address": "D4"})
    check(not still.is_error, text(still))


def server():
    command = json.loads(os.environ["HUMAN_PLUS_BRIDGE"])
    env = {"PATH": os.environ.get("PATH", "")}
    # What an MCP client's entry passes: the token, or the whole link (a
    # relay's, or a Reverb channel's), and the log level.
    for name in ("HUMAN_PLUS_TOKEN", "HUMAN_PLUS_INVITATION", "HUMAN_PLUS_LOG"):
        if name in os.environ:
            env[name] = os.environ[name]
    if "HUMAN_PLUS_TOKEN" not in env and "HUMAN_PLUS_INVITATION" not in env:
        raise SystemExit("neither HUMAN_PLUS_TOKEN nor HUMAN_PLUS_INVITATION is set")
    return StdioServerParameters(command=command[0], args=command[1:], env=env)


async def legacy(version):
    changes = Changes()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changes.seen()

    async with stdio_client(server()) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            with anyio.fail_after(STEP):
                result = await session.send_request(
                    types.InitializeRequest(
                        params=types.InitializeRequestParams(
                            protocol_version=version,
                            capabilities=types.ClientCapabilities(),
                            client_info=types.Implementation(name="python-sdk-test", version="0"),
                        )
                    ),
                    types.InitializeResult,
                )
            check(result.protocol_version == version, f"answered {result.protocol_version}")
            check(result.server_info.name == "human-plus", result.server_info)
            check(result.capabilities.tools.list_changed is True, result.capabilities)
            session.adopt(result)
            await session.send_notification(types.InitializedNotification())

            async def call_tool(name, args):
                with anyio.fail_after(STEP):
                    return await session.call_tool(name, args)

            async def list_tools():
                with anyio.fail_after(STEP):
                    return await session.list_tools()

            await story(session, changes, list_tools, call_tool)


async def modern(version):
    changes = Changes()
    async with Client(server(), mode="auto") as client:
        check(client.protocol_version == version, f"negotiated {client.protocol_version}")
        check(client.server_capabilities.tools.list_changed is True, client.server_capabilities)
        first = await client.list_tools(cache_mode="refresh")
        check(first.ttl_ms is not None and first.ttl_ms > 0, f"ttlMs {first.ttl_ms}")
        check(first.cache_scope == "private", f"cacheScope {first.cache_scope}")
        async with client.listen(tools_list_changed=True) as sub:

            async def pump():
                async for _event in sub:
                    changes.seen()

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump)

                async def call_tool(name, args):
                    with anyio.fail_after(STEP):
                        return await client.call_tool(name, args)

                async def list_tools():
                    with anyio.fail_after(STEP):
                        return await client.list_tools()

                await story(client, changes, list_tools, call_tool)
                tg.cancel_scope.cancel()


def main():
    version = os.environ["MCP_VERSION"]
    if version == "2026-07-28":
        anyio.run(modern, version)
    else:
        anyio.run(legacy, version)
    print(json.dumps({"passed": version}), flush=True)


if __name__ == "__main__":
    main()
