// Builds the npm packages of the `human-plus` command from a release
// binary, esbuild's way: one package per platform holding only the binary
// (`os`/`cpu` fields), and `human-plus`, a small launcher that lists every
// platform package as an optional dependency. No install script: npm
// installs the platform package that fits, nothing is downloaded.
//
//   node packaging/npm/build.mjs --version 0.1.0 --out DIR \
//        [--binary PLATFORM=PATH]...      (e.g. linux-x64=target/.../human-plus)
//
// Writes DIR/human-plus-VERSION.tgz and DIR/human-plus-PLATFORM-VERSION.tgz
// for each binary given (`npm pack`); the staging directories stay in
// DIR/stage. README.md and LICENSE come from the repository's root.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
const platforms = JSON.parse(readFileSync(join(here, "platforms.json"), "utf8"));

const args = process.argv.slice(2);
let version;
let out;
const binaries = {};
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === "--version") version = args[++i];
  else if (a === "--out") out = resolve(args[++i]);
  else if (a === "--binary") {
    const [platform, path] = args[++i].split(/=(.*)/s);
    if (!platforms[platform]) throw new Error(`unknown platform ${platform}`);
    binaries[platform] = resolve(path);
  } else throw new Error(`unknown argument ${a}`);
}
if (!version || !out) throw new Error("usage: build.mjs --version V --out DIR [--binary PLATFORM=PATH]...");

const common = {
  version,
  license: "MIT",
  repository: { type: "git", url: "git+https://github.com/human-plus/human-plus-rs.git" },
  homepage: "https://github.com/human-plus/human-plus-rs#readme",
};

function stage(name, pkg, files) {
  const dir = join(out, "stage", name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const [from, to, mode] of files) {
    mkdirSync(dirname(join(dir, to)), { recursive: true });
    copyFileSync(from, join(dir, to));
    chmodSync(join(dir, to), mode);
  }
  writeFileSync(join(dir, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
  const packed = execFileSync("npm", ["pack", "--json", "--pack-destination", out], {
    cwd: dir,
    encoding: "utf8",
    env: { ...process.env, npm_config_update_notifier: "false" },
  });
  const file = JSON.parse(packed)[0].filename;
  console.log(join(out, file));
}

mkdirSync(out, { recursive: true });
const docs = [
  [join(root, "README.md"), "README.md", 0o644],
  [join(root, "LICENSE"), "LICENSE", 0o644],
];

for (const [key, binary] of Object.entries(binaries)) {
  const p = platforms[key];
  const exe = p.os === "win32" ? "human-plus.exe" : "human-plus";
  const pkg = {
    name: p.package,
    ...common,
    description: `The human-plus binary for ${key}${p.libc ? ` (${p.libc})` : ""}; the human-plus package runs it.`,
    os: [p.os],
    cpu: [p.cpu],
    ...(p.libc ? { libc: [p.libc] } : {}),
    files: [`bin/${exe}`, "README.md", "LICENSE"],
    preferUnplugged: true,
  };
  stage(key, pkg, [[binary, `bin/${exe}`, 0o755], ...docs]);
}

const launcher = {
  name: "human-plus",
  ...common,
  description:
    "Join an AI agent to a live page a person has open: the human-plus command and its stdio MCP bridge (a native binary, no install script).",
  keywords: ["mcp", "agents", "relay", "cli"],
  bin: { "human-plus": "bin/human-plus.js" },
  files: ["bin/human-plus.js", "platforms.json", "README.md", "LICENSE"],
  engines: { node: ">=16" },
  optionalDependencies: Object.fromEntries(Object.values(platforms).map((p) => [p.package, version])),
};
stage("human-plus", launcher, [
  [join(here, "bin", "human-plus.js"), "bin/human-plus.js", 0o755],
  [join(here, "platforms.json"), "platforms.json", 0o644],
  ...docs,
]);
