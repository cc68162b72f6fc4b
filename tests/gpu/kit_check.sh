#!/usr/bin/env bash
# The GPU kit is self-contained. tests/gpu/kit.sh assembles it from a
# build (and prints its size), it is copied to a temporary folder, and:
#  - every carried binary (bin/*, and lib/*.xz unpacked) finds each shared
#    library it loads in the kit or among tests/gpu/base-libs.txt;
#  - the launcher runs --cpu-only --quick in a scrubbed environment
#    (env -i, PATH=/usr/bin:/bin) and, where user namespaces allow it
#    (unshare), with the checkout (build tree included), /usr/share/datasets
#    and the system's copies of the carried libraries hidden;
#  - its table has no failure, its three files are in $OUT, and the kit's
#    Fashion-MNIST gives the first losses that a checkout's build of
#    examples/mlp.kl gives on the system's copy (seed 1, one thread).
#
#   kit_check.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/kiln-kit-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- the kit, made and moved ----
bash "$root/tests/gpu/kit.sh" --build "$build" --out "$tmp/made" > "$tmp/kit.log" 2>&1 || { cat "$tmp/kit.log"; fail "kit.sh"; }
grep 'MiB' "$tmp/kit.log"
cp -a "$tmp/made" "$tmp/kit"
rm -rf "$tmp/made"
kit=$tmp/kit

# ---- every carried binary's libraries ----
base=$(grep -v '^#' "$root/tests/gpu/base-libs.txt")
mkdir "$tmp/libs"
for f in "$kit"/lib/*.xz; do
  [ -e "$f" ] || continue
  xz -dc "$f" > "$tmp/libs/$(basename "$f" .xz)"
done
n=0
for f in "$kit"/bin/* "$tmp"/libs/*; do
  [ -e "$f" ] || continue
  n=$((n + 1))
  while read -r name arrow path _; do
    if [ "$arrow" = "=>" ]; then
      [ "$path" != not ] || fail "${f#"$tmp"/}: $name not found"
      case $path in "$tmp/libs/"*) continue ;; esac
    fi
    grep -qxF "$(basename "$name")" <<< "$base" || fail "${f#"$tmp"/}: $name resolves outside the kit (${path:-$name}) and is not in base-libs.txt"
  done < <(env -i LD_LIBRARY_PATH="$tmp/libs" /usr/bin/ldd "$f" | grep -v 'statically linked')
done
echo "$n carried binaries load only the kit's libraries and base-libs.txt"

# ---- the reference: a checkout's build of the mlp on the system's data ----
data=/usr/share/datasets/fashion-mnist
ref=""
if grep -q '^data fashion-mnist' "$kit/MANIFEST"; then
  kiln=$(find "$build" -type f -name kiln -perm -u+x -not -path '*/CMakeFiles/*' -printf '%d %p\n' | sort -n | head -1 | cut -d' ' -f2-)
  "$kiln" build "$root/examples/mlp.kl" -o "$tmp/mlp" > "$tmp/mlp.build.log" 2>&1 || { cat "$tmp/mlp.build.log"; fail "kiln build"; }
  "$tmp/mlp" --device cpu --threads 1 --seed 1 --steps 2 --log-every 1 --data "$data" --quiet --metrics "$tmp/ref.json" > /dev/null
  ref=$(python3 -c 'import json, sys; print(" ".join("%.6g" % r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"))' "$tmp/ref.json")
  echo "reference losses (checkout, $data): $ref"
fi

# ---- the launcher, scrubbed ----
mkdir "$tmp/out" "$tmp/home" "$tmp/empty"
run=(env -i PATH=/usr/bin:/bin HOME="$tmp/home" TMPDIR="$tmp" OUT="$tmp/out" bash "$kit/run.sh" --cpu-only --quick)
if unshare -rm true 2> /dev/null; then
  # Mounts in a private namespace: empty folders over the checkout and the
  # data, /dev/null over the system's copies of the carried libraries.
  hide=("$root")
  case $build in "$root"/*) ;; *) hide+=("$build") ;; esac
  [ -d "$data" ] && hide+=("$data")
  files=()
  for f in "$tmp"/libs/*; do
    [ -e "$f" ] || continue
    sys=$(ldd "$kit/bin/kiln" | awk -v n="$(basename "$f")" '$1 == n && $3 ~ /^\// {print $3}')
    [ -n "$sys" ] && files+=("$(readlink -f "$sys")")
  done
  script='set -e; for d in "${@:2:$1}"; do mount --bind "$E" "$d"; done; shift $(($1 + 1)); '
  script+='for f in "${@:2:$1}"; do mount --bind /dev/null "$f"; done; shift $(($1 + 1)); cd /; exec "$@"'
  echo "hidden: ${hide[*]} ${files[*]}"
  E=$tmp/empty unshare -rm bash -c "$script" hide "${#hide[@]}" "${hide[@]}" "${#files[@]}" "${files[@]}" "${run[@]}" \
    > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "the launcher failed (scrubbed, in a namespace)"; }
else
  echo "no user namespaces here: the checkout and /usr/share/datasets stay visible (env -i and PATH still scrubbed)"
  (cd / && "${run[@]}") > "$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; fail "the launcher failed (scrubbed)"; }
fi

# ---- what came back ----
for f in table.md summary.json logs.tar.gz; do
  [ -s "$tmp/out/$f" ] || { cat "$tmp/run.log"; fail "no $f in \$OUT"; }
done
[ "$(ls "$tmp/out" | wc -l)" -le 8 ] || fail "more than 8 files in \$OUT (the device tool returns 8)"
# (the listing whole first: grep -q closing the pipe early would fail tar under pipefail)
listing=$(tar -tzf "$tmp/out/logs.tar.gz")
grep -q 'run/mlp.fp32.cpu.steps.json$' <<< "$listing" || fail "logs.tar.gz lacks the steps' JSON"
python3 - "$tmp/out/summary.json" "$ref" <<'EOF' || { cat "$tmp/run.log"; fail "summary.json"; }
import json, sys
s = json.load(open(sys.argv[1]))
rows = {r["check"]: r for r in s["rows"]}
assert s["failures"] == 0, [r for r in s["rows"] if r["verdict"] == "FAIL"]
assert s["mode"] == "kit, cpu-only, quick", s["mode"]
for m in ("mlp", "fashion_cnn"):
    for p in ("fp32", "bf16"):
        r = rows["%s %s: 5 steps, CPU vs cpu" % (m, p)]
        assert r["verdict"] == "ok", r
assert rows["kit: libraries"]["verdict"] == "ok"
assert any(k.startswith("kit: commit") and r["verdict"] == "ok" for k, r in rows.items()), "MANIFEST check"
if sys.argv[2]:
    r = rows["kit: Fashion-MNIST"]
    assert r["verdict"] == "ok" and "losses %s " % sys.argv[2] in r["result"], (r, sys.argv[2])
print("launcher: %d rows, 0 failures, in %s s" % (len(s["rows"]), s["elapsed_s"]))
EOF
echo "the kit is self-contained"
