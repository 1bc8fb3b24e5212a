"""The Python port's side of the core benchmarks.

Times the port's (``prism-ai-human-plus``) counterpart of each Rust workload
in ``bench/src/workloads.rs`` on the same input files (``bench/data``), with
the same harness as ``bench/src/timing.rs``: calibrate a batch to at least
10 ms of the thread's CPU time, time 21 batches, report the per-call CPU
time of the fastest and of the median batch. Prints one JSON object: ``{workload: {min_ns, median_ns,
iters}}``. Run it through ``bench/python/run.sh``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import prism_human_plus as hp
from prism_human_plus import (
    ChangeFeed,
    Participant,
    RelayResponse,
    RelayStream,
    ResultGuard,
    SsePostRelayTransport,
    SurfaceAttachment,
    SurfaceChanges,
    SurfaceInvitation,
    ToolDefinition,
    TrustPolicy,
)

BATCH_TARGET = 10_000_000  # ns of thread CPU time
REPEATS = 21


def timed(fn) -> dict:
    iters = 1
    clock = time.thread_time_ns
    while True:
        start = clock()
        for _ in range(iters):
            fn()
        if clock() - start >= BATCH_TARGET or iters >= 1 << 30:
            break
        iters *= 2
    per_call = []
    for _ in range(REPEATS):
        start = clock()
        for _ in range(iters):
            fn()
        per_call.append((clock() - start) / iters)
    per_call.sort()
    return {"min_ns": per_call[0], "median_ns": per_call[REPEATS // 2], "iters": iters}


class FakeHttp:
    """The port's ``RelayHttp`` seam, answering from memory: the POST is
    accepted and the stream yields the pre-cut chunks."""

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks

    def post(self, url, headers, body):
        return RelayResponse(200, "")

    def stream(self, url, headers):
        return RelayStream(200, iter(self.chunks))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    data = Path(args.data)

    manifest = json.loads((data / "manifest.json").read_text("utf-8"))
    expected = manifest["expected_id"]
    sse_text = (data / "sse_stream.txt").read_text("utf-8")
    noisy = [line for line in (data / "noisy_frames.jsonl").read_text("utf-8").split("\n") if line]
    tools_text = (data / "tools_list.json").read_text("utf-8")
    tools_value = json.loads(tools_text)
    policy_value = json.loads((data / "policy.json").read_text("utf-8"))
    policy = TrustPolicy.allowing(policy_value["allow"], policy_value["pins"])
    changes_text = (data / "changes.json").read_text("utf-8")
    changes_value = json.loads(changes_text)
    result_text = (data / "result_64k.txt").read_text("utf-8")
    call_params = json.loads((data / "call_params.json").read_text("utf-8"))
    request_id = manifest["request_id"]

    invitation = SurfaceInvitation(
        "http://127.0.0.1:8080", "demo_001", "0123456789abcdef0123", "sheet:one", "sheets",
        allow_insecure_loopback=True,
    )
    attachment = SurfaceAttachment(
        id="surface_0123456789abcdef01234567",
        owner="bench",
        invitation=invitation,
        participant=Participant("agent-bench", "Bench", "#7c3aed"),
        client_id="py_0123456789abcdef",
    )
    request = {"jsonrpc": "2.0", "id": expected, "method": "tools/call"}

    def transport(chunk: int) -> SsePostRelayTransport:
        chunks = [sse_text[i : i + chunk] for i in range(0, len(sse_text), chunk)]
        return SsePostRelayTransport(
            FakeHttp(chunks), ["127.0.0.1"], [8080],
            max_frame_bytes=1 << 40, allow_unverified_egress=True,
        )

    t8, t64 = transport(8192), transport(65536)

    def admit(tools) -> list:
        # What the port's manager does with a tools/list answer (`_discover`
        # after `LegacyMcpClient.tools`).
        admitted = []
        for entry in tools["tools"]:
            tool = ToolDefinition.from_dict(entry)
            if not policy.allows(tool.name):
                continue
            policy.assert_allows(tool)
            admitted.append(tool)
        return admitted

    def digest_all():
        return [ToolDefinition.from_dict(e).digest() for e in tools_value["tools"]]

    def correlate_noisy():
        for frame in noisy:
            decoded = json.loads(frame)
            if isinstance(decoded, dict) and decoded.get("id") == expected:
                return decoded
        return None

    guard = ResultGuard()

    # Sanity: the same answers as the Rust side.
    assert t8.exchange(attachment, request)["id"] == expected
    assert len(admit(tools_value)) == len(policy_value["pins"]), "pins disagree"
    assert len(SurfaceChanges.read_from(changes_value, ChangeFeed.OFFERED).changes) == 1000
    assert correlate_noisy()["id"] == expected

    workloads = {
        "sse_receive_8k": lambda: t8.exchange(attachment, request),
        "sse_receive_64k": lambda: t64.exchange(attachment, request),
        "admit": lambda: admit(tools_value),
        "admit_bytes": lambda: admit(json.loads(tools_text)),
        "digest_all": digest_all,
        "changes": lambda: SurfaceChanges.read_from(changes_value, ChangeFeed.OFFERED),
        "changes_bytes": lambda: SurfaceChanges.read_from(json.loads(changes_text), ChangeFeed.OFFERED),
        "frame": lambda: guard.guard("sheet:one", "sheet_get_range", result_text),
        "copy": lambda: result_text + "\n",
        "encode": lambda: hp._dump(
            {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call_params}
        ),
        "correlate_noisy": correlate_noisy,
    }
    only = {w for w in args.only.split(",") if w}
    out = {}
    for name, fn in workloads.items():
        if only and name not in only:
            continue
        out[name] = timed(fn)
        print(f"python {name}: {out[name]['min_ns'] / 1000:.1f} us", file=sys.stderr)
    out["_python"] = sys.version.split()[0]
    out["_package"] = "prism-ai-human-plus " + __import__("importlib.metadata").metadata.version(
        "prism-ai-human-plus"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
