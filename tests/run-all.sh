#!/bin/sh
# Run every Criterion suite given on the command line; print a plain total and
# exit non-zero if any suite failed.
pass=0; fail=0; failed=""
for t in "$@"; do
	echo "=== $(basename "$t")"
	if "$t" --jobs 1 --verbose=0; then pass=$((pass+1)); else fail=$((fail+1)); failed="$failed $(basename "$t")"; fi
done
echo "suites: $pass passed, $fail failed"
[ "$fail" -eq 0 ] || { echo "failed suites:$failed"; exit 1; }
