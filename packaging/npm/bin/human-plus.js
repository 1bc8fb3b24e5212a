#!/usr/bin/env node
// The `human-plus` command from npm. The native binary is in the package
// for this platform (`@human-plus/<os>-<cpu>`), an optional dependency
// whose `os`/`cpu` fields let npm install only the one that fits; nothing
// is downloaded here. This script finds it and runs it with the same
// arguments, standard streams and exit status.
"use strict";

const { spawn } = require("child_process");
const platforms = require("../platforms.json");

function fail(message, hint) {
  process.stderr.write(`human-plus: ${message}\n`);
  if (hint) process.stderr.write(`  hint: ${hint}\n`);
  process.exit(1);
}

function binary() {
  const key = `${process.platform}-${process.arch}`;
  const platform = platforms[key];
  if (!platform) {
    fail(
      `there is no human-plus binary for ${key} (there is for ${Object.keys(platforms).join(", ")})`,
      "with a Rust toolchain: cargo install human-plus-cli",
    );
  }
  const exe = process.platform === "win32" ? "human-plus.exe" : "human-plus";
  try {
    return require.resolve(`${platform.package}/bin/${exe}`);
  } catch {
    let why = "";
    if (platform.libc === "glibc" && process.report && !process.report.getReport().header.glibcVersionRuntime) {
      why = " (it needs the GNU C library; this system has another)";
    }
    return fail(
      `${platform.package}, the package holding human-plus for ${key}, is not installed${why}`,
      "it is an optional dependency: install human-plus again without --omit=optional or --no-optional",
    );
  }
}

const child = spawn(binary(), process.argv.slice(2), { stdio: "inherit", windowsHide: true });
child.on("error", (e) => fail(`cannot start the binary: ${e.message}`));
// A terminal's Ctrl-C reaches the whole process group, the binary too:
// this process only waits for it. A signal sent to this process alone (an
// MCP client stopping its server) is passed on.
process.on("SIGINT", () => {});
for (const signal of ["SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("exit", (code, signal) => {
  if (signal) {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code === null ? 1 : code);
  }
});
