// A stand-in for the npm registry on loopback, for `.ci/package`: it serves
// the npm packages built into a directory (`*.tgz` from `npm pack`) by the
// registry's read protocol (a package document at /NAME, tarballs under
// /-/), so `npx -y human-plus` resolves and installs them as it will from
// the registry once they are published. Any other name is 404.
//
//   node .ci/npm-registry.mjs DIR      # prints its URL, serves until killed
//
// Each request is logged on stderr (`GET /NAME`).
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";

const dir = process.argv[2];
if (!dir) throw new Error("usage: npm-registry.mjs DIR");

/** package/package.json from a tarball npm packed (ustar entries). */
function manifestOf(tgz) {
  const tar = gunzipSync(tgz);
  for (let at = 0; at + 512 <= tar.length; ) {
    const name = tar.toString("utf8", at, at + 100).replace(/\0.*$/s, "");
    const size = parseInt(tar.toString("utf8", at + 124, at + 136).replace(/\0.*$/s, "").trim() || "0", 8);
    if (!name) break;
    if (name === "package/package.json") {
      return JSON.parse(tar.toString("utf8", at + 512, at + 512 + size));
    }
    at += 512 + Math.ceil(size / 512) * 512;
  }
  throw new Error("no package/package.json in a tarball");
}

const packages = new Map(); // name -> { versions: { v: manifest }, latest }
const tarballs = new Map(); // file -> bytes
let base = "";

for (const file of readdirSync(dir).filter((f) => f.endsWith(".tgz"))) {
  const bytes = readFileSync(join(dir, file));
  const manifest = manifestOf(bytes);
  tarballs.set(file, bytes);
  const entry = packages.get(manifest.name) ?? { versions: {}, files: {} };
  entry.versions[manifest.version] = manifest;
  entry.files[manifest.version] = {
    file,
    integrity: "sha512-" + createHash("sha512").update(bytes).digest("base64"),
    shasum: createHash("sha1").update(bytes).digest("hex"),
  };
  entry.latest = manifest.version;
  packages.set(manifest.name, entry);
}

const server = createServer((req, res) => {
  const path = decodeURIComponent(new URL(req.url, "http://x").pathname).replace(/^\//, "");
  process.stderr.write(`${req.method} /${path}\n`);
  if (path.startsWith("-/") && tarballs.has(path.slice(2))) {
    res.writeHead(200, { "content-type": "application/octet-stream" });
    return res.end(tarballs.get(path.slice(2)));
  }
  const entry = packages.get(path);
  if (!entry) {
    res.writeHead(404, { "content-type": "application/json" });
    return res.end(JSON.stringify({ error: "not_found" }));
  }
  const versions = {};
  for (const [v, manifest] of Object.entries(entry.versions)) {
    const f = entry.files[v];
    versions[v] = {
      ...manifest,
      dist: { tarball: `${base}/-/${f.file}`, integrity: f.integrity, shasum: f.shasum },
    };
  }
  res.writeHead(200, { "content-type": "application/json" });
  res.end(JSON.stringify({ name: path, "dist-tags": { latest: entry.latest }, versions }));
});

server.listen(0, "127.0.0.1", () => {
  base = `http://127.0.0.1:${server.address().port}`;
  console.log(base + "/");
});
