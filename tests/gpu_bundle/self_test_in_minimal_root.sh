#!/usr/bin/env bash
# The GPU check bundle without a GPU (docs/architecture.md §10, "The GPU check"): makes
# the bundle (scripts/gpu_bundle.sh), unpacks it into a root file system that holds only
# Debian's minimal base (debootstrap --variant=minbase, cached as a tarball between
# runs) with the CUDA toolkit's folder bound read-only and the repository's tree read-only,
# and runs `run.sh --self-test` there under chroot in a mount namespace of its own. First
# it shows that the root hides every library scripts/setup.sh installs: each of those
# packages that the minimal base does not itself hold has none of its shared libraries in
# the root. Prints the bundle's packed size and the self-test's run time.
#
#   tests/gpu_bundle/self_test_in_minimal_root.sh BUILD_DIR
#
# Exit status: 0 passed, 1 failed, 77 skipped (not root, no nvcc build, no debootstrap
# or unshare, or no network for the first debootstrap; under CI=true these fail instead).
set -u -o pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
skip() {
  if [[ ${CI:-} == true ]]; then echo "FAIL (CI): $*"; exit 1; fi
  echo "SKIP: $*"; exit 77
}
[[ $(id -u) == 0 ]] || skip "needs root (chroot and mounts)"
grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.\+' "$BUILD/CMakeCache.txt" || skip "the build has no CUDA backend (no nvcc)"
for tool in debootstrap unshare chroot xz; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh installs it)"
done
CUDA=$(readlink -f /usr/local/cuda)
[[ -d $CUDA ]] || skip "no CUDA toolkit at /usr/local/cuda"

TMP=$(mktemp -d /tmp/olmo2-gpu-bundle-XXXXXX)
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT

# ---- the bundle ------------------------------------------------------------------------------
t0=$(date +%s)
OLMO2_BUNDLE_BUILD=$BUILD "$REPO/scripts/gpu_bundle.sh" "$TMP/gpu-bundle" || { echo "FAIL: gpu_bundle.sh"; exit 1; }
packed=$(stat -c %s "$TMP/gpu-bundle.tar.xz")
echo "bundle made and packed in $(($(date +%s) - t0)) s: $((packed / 1048576)).$(((packed % 1048576) * 10 / 1048576)) MiB packed"
rm -rf "$TMP/gpu-bundle"  # the check runs what the packed file holds

# ---- the minimal root ------------------------------------------------------------------------
CACHE=${OLMO2_MINBASE_CACHE:-/var/cache/olmo2}
BASE=$CACHE/bookworm-minbase.tar
if [[ ! -s $BASE ]]; then
  mkdir -p "$CACHE"
  echo "making Debian bookworm minbase (debootstrap, once; cached as $BASE)"
  if ! debootstrap --variant=minbase bookworm "$TMP/base" http://deb.debian.org/debian >"$TMP/debootstrap.log" 2>&1; then
    tail -5 "$TMP/debootstrap.log"
    skip "debootstrap failed (no network to deb.debian.org?)"
  fi
  tar -C "$TMP/base" -cf "$BASE.part" . && mv "$BASE.part" "$BASE"
  rm -rf "$TMP/base"
fi
ROOT=$TMP/root
mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$BASE" || { echo "FAIL: cannot unpack $BASE"; exit 1; }

# Proof that the root hides what scripts/setup.sh installs: for each of its packages that
# the minimal base does not hold, none of the package's shared libraries is in the root.
mapfile -t PACKAGES < <(sed -n '/^PACKAGES=(/,/)/p' "$REPO/scripts/setup.sh" | tr -d '()' | sed 's/PACKAGES=//' | tr ' ' '\n' | grep -v '^$')
in_root() { grep -q "^Package: $1\$" "$ROOT/var/lib/dpkg/status"; }
leaks=""
hidden=0
for p in "${PACKAGES[@]}"; do
  in_root "$p" && continue
  while read -r f; do
    [[ $f == *.so* && -f $f ]] || continue
    if [[ -e $ROOT$f ]]; then leaks+="$p:$f "; fi
    hidden=$((hidden + 1))
  done < <(dpkg -L "$p" 2>/dev/null)
done
[[ -z $leaks ]] || { echo "FAIL: the minimal root holds libraries of setup.sh's packages: $leaks"; exit 1; }
echo "the minimal root holds none of the $hidden shared libraries of setup.sh's ${#PACKAGES[@]} packages that minbase does not hold"

# ---- the self-test, inside ----------------------------------------------------------------------
mkdir -p "$ROOT/bundle-parent" "$ROOT/src" "$ROOT$CUDA" "$ROOT/out"
tar -C "$ROOT/bundle-parent" -xJf "$TMP/gpu-bundle.tar.xz" || { echo "FAIL: cannot unpack the bundle"; exit 1; }
ln -sfn "$CUDA" "$ROOT/usr/local/cuda"
t1=$(date +%s)
unshare --mount --fork bash -c "
  set -e
  mount --make-rprivate /
  mount --bind '$REPO' '$ROOT/src' && mount -o remount,bind,ro '$ROOT/src'
  mount --bind '$CUDA' '$ROOT$CUDA' && mount -o remount,bind,ro '$ROOT$CUDA'
  mount -t proc proc '$ROOT/proc'
  mount --rbind /sys '$ROOT/sys'
  mount --rbind /dev '$ROOT/dev'
  mount -t tmpfs -o size=2g tmpfs '$ROOT/tmp'
  mkdir -p '$ROOT/dev/shm' && mount -t tmpfs tmpfs '$ROOT/dev/shm' || true
  exec chroot '$ROOT' /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    /bundle-parent/gpu-bundle/run.sh --self-test --source /src --out /out
"
status=$?
echo "self-test: exit $status in $(($(date +%s) - t1)) s inside the minimal root (bundle $((packed / 1048576)).$(((packed % 1048576) * 10 / 1048576)) MiB packed)"
[[ -f $ROOT/out/results.json ]] && cat "$ROOT/out/results.json"
if (( status != 0 )); then
  for log in "$ROOT"/out/*.log; do
    echo "--- $(basename "$log") (end)"; tail -15 "$log"
  done
fi
exit $status
