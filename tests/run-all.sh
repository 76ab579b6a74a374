#!/bin/bash
# Run every test family and print one closing line "N passed, N failed".
# Suites run in $BUILD: unit, fuzz-smoke, e2e (those that have tests);
# then the unit suite again in the ASan+UBSan build $ASAN_BUILD.
set -u
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
SUITES=${SUITES:-unit fuzz-smoke e2e}
passed=0
failed=0

# meson test prints "Ok: N" / "Fail: N" / "Timeout: N" ... in its summary.
run() {
	local dir=$1 suite=$2 out ok fail
	if ! meson test -C "$dir" --list --suite "$suite" >/dev/null 2>&1 ||
		[ -z "$(meson test -C "$dir" --list --suite "$suite" 2>/dev/null)" ]; then
		echo "== $dir: suite $suite has no tests"
		return
	fi
	echo "== $dir: suite $suite"
	out=$(meson test -C "$dir" --suite "$suite" --print-errorlogs 2>&1)
	echo "$out" | tail -n 200
	ok=$(echo "$out" | awk '/^Ok:/ {print $2}')
	fail=$(echo "$out" | awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $NF} END {print s + 0}')
	if [ -z "$ok" ]; then
		echo "meson test did not finish in $dir (suite $suite)"
		fail=$((fail + 1))
		ok=0
	fi
	passed=$((passed + ok))
	failed=$((failed + fail))
}

if [ -n "$(git ls-files '*.c' '*.h' 2>/dev/null)" ]; then
	echo "== clang-format check"
	if git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror; then
		passed=$((passed + 1))
	else
		echo "unformatted files: run 'make format'"
		failed=$((failed + 1))
	fi
fi

for s in $SUITES; do
	run "$BUILD" "$s"
done
run "$ASAN_BUILD" unit

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
