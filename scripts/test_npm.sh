#!/usr/bin/env bash
# Tests the npm packages the way a user gets them: packs `agentvfs` (the typed client) and
# this machine's `@agentvfs/<platform>` (the avfs binary), installs both from the tarballs
# into a fresh project with npm offline (no registry involved), then runs node's test runner
# against real vaults, a real FUSE mount and real proxied commands.
#
#   scripts/test_npm.sh            # from a clone; builds target/release/avfs (no-op if fresh)
#   AVFS_NPM_KEEP=1 scripts/test_npm.sh   # keep the temp dir (tarballs, project) to look at
#
# Needs node >= 18 and npm (the test's dev dependencies ajv, typescript and @types/node come
# from the npm registry). Without /dev/fuse the proxy and session tests fail unless
# AVFS_CI_ALLOW_NO_FUSE=1 is set, which skips them visibly.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/avfs-npm.XXXXXX")
cleanup() {
  if [ "${AVFS_NPM_KEEP:-}" = "1" ]; then
    echo "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
npm_quiet=(--no-audit --no-fund --loglevel=warn)

echo "== avfs binary"
bin="${CARGO_TARGET_DIR:-$root/target}/release/avfs"
# Always (re)build: a no-op when up to date, and never tests a stale binary.
cargo build --release --locked
"$bin" --version

echo "== versions"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
platform=$(node -p 'process.platform + "-" + process.arch')
if [ ! -f "npm/platforms/$platform/package.json" ]; then
  echo "error: no npm platform package for $platform (npm/platforms/)" >&2
  exit 1
fi
# Every package carries the crate's version and agentvfs pins each platform package to it.
node - "$version" <<'EOF'
const fs = require("fs");
const version = process.argv[2];
const read = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const main = read("npm/agentvfs/package.json");
const problems = [];
if (main.version !== version) problems.push(`npm/agentvfs is ${main.version}, Cargo.toml ${version}`);
const platforms = fs.readdirSync("npm/platforms");
for (const p of platforms) {
  const pkg = read(`npm/platforms/${p}/package.json`);
  if (pkg.name !== `@agentvfs/${p}`) problems.push(`npm/platforms/${p} is named ${pkg.name}`);
  if (pkg.version !== version) problems.push(`${pkg.name} is ${pkg.version}, Cargo.toml ${version}`);
  if (main.optionalDependencies[pkg.name] !== version) problems.push(`agentvfs does not pin ${pkg.name} to ${version}`);
}
for (const dep of Object.keys(main.optionalDependencies)) {
  if (!platforms.includes(dep.replace("@agentvfs/", ""))) problems.push(`agentvfs lists ${dep}, which npm/platforms lacks`);
}
if (problems.length) { console.error("error: " + problems.join("\nerror: ")); process.exit(1); }
console.log(`agentvfs ${version}, platforms: ${platforms.join(", ")}`);
EOF

echo "== pack agentvfs (build with tsc)"
stage="$work/stage"
tarballs="$work/tarballs"
mkdir -p "$stage/agentvfs" "$stage/platform/bin" "$tarballs"
cp -r npm/agentvfs/package.json npm/agentvfs/tsconfig.json npm/agentvfs/README.md npm/agentvfs/src "$stage/agentvfs/"
cp LICENSE "$stage/agentvfs/"
# Dev dependencies (typescript, @types/node) only; the platform packages are not needed to build.
(cd "$stage/agentvfs" && npm install "${npm_quiet[@]}" --omit=optional && npm pack --pack-destination "$tarballs")

echo "== pack @agentvfs/$platform"
cp "npm/platforms/$platform/package.json" "npm/platforms/$platform/README.md" "$stage/platform/"
cp LICENSE "$stage/platform/"
install -m 755 "$bin" "$stage/platform/bin/avfs"
(cd "$stage/platform" && npm pack --pack-destination "$tarballs")

main_tgz="$tarballs/agentvfs-$version.tgz"
plat_tgz="$tarballs/agentvfs-$platform-$version.tgz"
ls -l "$main_tgz" "$plat_tgz"

echo "== install offline into a fresh project"
project="$work/project"
mkdir -p "$project/test"
# agentvfs from its tarball; its optional dependency @agentvfs/<platform> resolved, through an
# override, to the other tarball, so it is installed the way users get it (as agentvfs's dependency).
node - "$project/package.json" "$main_tgz" "@agentvfs/$platform" "$plat_tgz" <<'EOF'
const [file, mainTgz, platName, platTgz] = process.argv.slice(2);
const pkg = {
  name: "avfs-npm-test",
  private: true,
  dependencies: { agentvfs: `file:${mainTgz}` },
  overrides: { [platName]: `file:${platTgz}` },
};
require("fs").writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
EOF
# --offline with an empty cache and an unreachable registry: nothing can come from the network.
(cd "$project" && npm install "${npm_quiet[@]}" --offline --cache "$work/empty-cache" --registry http://127.0.0.1:9/)
test -x "$project/node_modules/@agentvfs/$platform/bin/avfs"
(cd "$project" && npm ls --all)

echo "== test dependencies (registry)"
(cd "$project" && npm install "${npm_quiet[@]}" --save-dev ajv@^8.17.1 typescript@~5.9.3 @types/node@^20.19.0)

echo "== node --test"
cp npm/test/*.mjs "$project/test/"
cp -r npm/test/typecheck "$project/test/"
cp schema/avfs.schema.json "$project/test/"
cd "$project"
unset AVFS_BIN AVFS_WORKSPACE AVFS_VAULT AVFS_HOME
node --test --test-reporter=spec test/*.test.mjs
