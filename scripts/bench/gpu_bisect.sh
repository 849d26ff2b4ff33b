#!/usr/bin/env bash
# One command at several commits in one device call, to A/B kernel changes across history with one machine's
# warm-up: each commit's engine/, lab/, checkers/ and tests/ (a git archive made here beforehand, with pyproject.toml
# for pytest; 2 MB compressed, so six fit a device call's carry beside the wheels) run from its own folder
# ($BISECT/trees/<sha>, unpacked afresh by each run), so a variant's GPU tests run against its own kernels. They share
# one CUDA cache ($BISECT_CACHE): an object is named by the hash of its source and headers, so a commit reuses the
# objects of the sources it did not change and builds its own for those it did.
#   bash scripts/bench/gpu_bisect.sh prepare 063f476 0dcf3de HEAD          # here: writes $BISECT (.dev/bisect)
#   OUT=$OUT bash scripts/bench/gpu_bisect.sh run -- python3 -m lab.persistent.trace   # on the device; carry .dev
#   OUT=$OUT bash scripts/bench/gpu_bisect.sh run main variant/x -- python3 -m lab bench gemm_small  # two of them
# `run` takes the commits in the order `prepare` was given them (or those of them named as they were given, or by
# sha), each with at most $LIMIT seconds (default 100), and appends to $OUT/bisect.txt: the command, then per commit
# its subject and the command's last 40 lines. So one call can run several A/Bs, each on its own commits, and share
# the baseline's archive and cache. The command must exist at every commit it runs on. The archives hold no .git,
# so a ledger record (which names a clean commit) cannot be written from them.
set -u
BISECT="${BISECT:-.dev/bisect}"
ARCHIVED=(engine lab checkers tests pyproject.toml)  # what an archive holds: the code, its tests, pytest's config
usage() { echo "usage: $0 prepare COMMIT... | $0 run [COMMIT...] -- COMMAND..." >&2; exit 2; }

prepare() {
  [ $# -gt 0 ] || usage
  case "$BISECT" in "" | / | . | .. | "$HOME") echo "$0: BISECT=$BISECT: not a folder to replace" >&2; exit 1 ;; esac
  rm -rf "$BISECT" && mkdir -p "$BISECT" || exit 1
  for c in "$@"; do
    case "$c" in *.patch) prepare_patch "$c" || exit 1; continue ;; esac
    sha=$(git rev-parse --short=9 "$c^{commit}") || { echo "$0: $c: not a commit" >&2; exit 1; }
    git archive --format=tar.gz -o "$BISECT/$sha.tar.gz" "$sha" "${ARCHIVED[@]}" || exit 1
    echo "$sha $(git log -1 --format=%s "$sha")" >> "$BISECT/ORDER"
    echo "$sha $c" >> "$BISECT/NAMES"
    echo "prepared $sha ($c)"
  done
  du -sh "$BISECT" | sed 's/^/size: /'
}

# A variant kept as a patch (scripts/bench/variants/NAME.patch, `git format-patch` of one commit): applied onto HEAD
# in a scratch copy of HEAD's files and archived as <HEAD sha>+NAME. A patch that no longer applies stops here, with
# git's message, not on the device.
prepare_patch() {
  local patch="$1" base name id tmp subject
  [ -f "$patch" ] || { echo "$0: $patch: no such patch file" >&2; return 1; }
  base=$(git rev-parse --short=9 HEAD) || return 1
  name=$(basename "$patch" .patch)
  id="$base+$name"
  tmp=$(mktemp -d) || return 1
  git archive HEAD "${ARCHIVED[@]}" | tar -x -C "$tmp" || { rm -rf "$tmp"; return 1; }
  patch="$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")"
  if ! (cd "$tmp" && git apply -p1 "$patch"); then
    echo "$0: $patch: does not apply onto HEAD ($base)" >&2; rm -rf "$tmp"; return 1
  fi
  tar -czf "$BISECT/$id.tar.gz" -C "$tmp" "${ARCHIVED[@]}" || { rm -rf "$tmp"; return 1; }
  rm -rf "$tmp"
  subject=$(sed -n 's/^Subject: \(\[PATCH[^]]*\] \)\{0,1\}//p' "$patch" | head -n 1)
  echo "$id ${subject:-$name} (patch on $base)" >> "$BISECT/ORDER"
  echo "$id $name" >> "$BISECT/NAMES"
  echo "prepared $id ($patch)"
}

run() {
  names=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do names+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || usage
  OUT="${OUT:?set OUT}"
  [ -f "$BISECT/ORDER" ] || { echo "$0: no $BISECT/ORDER: run prepare first (and carry .dev)" >&2; exit 1; }
  WHEELS="${WHEELS:-.whl}"
  . "$(dirname "$0")/wheels.sh"
  export VT_CUDA_ARCHS="${VT_CUDA_ARCHS:-9.0}" PYTHONUNBUFFERED=1
  root=$(pwd)
  picked=$(pick "${names[@]}") || exit 1
  echo "## $*" >> "$OUT/bisect.txt"
  while read -r sha subject; do
    log="/tmp/bisect-$sha.log"
    t0=$(date +%s)
    tree="$BISECT/trees/$sha"
    rm -rf "$tree" && mkdir -p "$tree" && tar -xzf "$BISECT/$sha.tar.gz" -C "$tree" || exit 1
    ( cd "$tree" && VT_CUDA_CACHE="${BISECT_CACHE:-/tmp/bisect-cache}" timeout "${LIMIT:-100}" "$@" ) \
      < /dev/null > "$log" 2>&1
    rc=$?
    cd "$root" || exit 1
    { echo "== $sha $subject: rc=$rc in $(( $(date +%s) - t0 )) s"; tail -n 40 "$log"; } >> "$OUT/bisect.txt"
    echo "$sha rc=$rc in $(( $(date +%s) - t0 )) s: $subject"
  done <<< "$picked"
}

# The ORDER lines of the commits named (a name as `prepare` was given it, or a sha's start), all when none is named.
pick() {
  [ $# -eq 0 ] && { cat "$BISECT/ORDER"; return; }
  for n in "$@"; do
    sha=$(awk -v n="$n" '$2 == n || index($1, n) == 1 { print $1; exit }' "$BISECT/NAMES")
    [ -n "$sha" ] || { echo "$0: $n: not among the prepared commits ($BISECT/NAMES)" >&2; return 1; }
    grep "^$sha " "$BISECT/ORDER"
  done
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) usage ;;
esac
