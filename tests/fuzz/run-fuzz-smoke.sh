#!/bin/sh
# Run one libFuzzer target for a bounded time over a copy of its committed
# corpus (a smoke run never rewrites the committed corpus). A finding is kept
# under ${TKBOX_FUZZ_ARTIFACTS:-/tmp/tkbox-fuzz-artifacts} and its path printed.
# usage: run-fuzz-smoke.sh TARGET CORPUS_DIR SECONDS
set -eu
target=$1 corpus=$2 seconds=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artifacts=${TKBOX_FUZZ_ARTIFACTS:-/tmp/tkbox-fuzz-artifacts}/$(basename "$target")
mkdir -p "$work/corpus" "$artifacts"
if [ -d "$corpus" ]; then
	cp -R "$corpus/." "$work/corpus/"
fi
set +e
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$artifacts/" "$work/corpus"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
	echo "fuzz target $(basename "$target") failed (exit $rc); reproducers in $artifacts" >&2
fi
exit "$rc"
