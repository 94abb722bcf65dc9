#!/usr/bin/env bash
# loaded.sh: a suite run under a CPU hog, to show that no test depends on
# the machine's speed (a test waits for what it waits for; time is a
# benchmark figure, never an assertion). stress-ng (Debian's) keeps every
# CPU busy at normal priority the whole time; the suite runs RUNS times in
# a row; each run's exit status and time are printed, and the script fails
# when any run failed.
#
#   sudo hack/loaded.sh [-runs N] [CMD ARGS...]
#
# CMD defaults to the README's test command (hack/test.sh); -runs to 2.
# Example, the sandbox suites alone:
#   sudo hack/loaded.sh -runs 2 go test -count=1 -p 1 ./test/e2e/
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
log() { echo "loaded: $*" >&2; }
runs=2
if [ "${1:-}" = -runs ]; then
	runs=$2
	shift 2
fi
[[ $runs =~ ^[1-9][0-9]*$ ]] || { log "-runs $runs: want a count"; exit 2; }
(($#)) || set -- hack/test.sh
# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh
command -v stress-ng >/dev/null || apt_install stress-ng
cpus=$(nproc)
setsid stress-ng --cpu "$cpus" --cpu-method matrixprod --quiet &
hog=$!
trap 'kill -- -"$hog" 2>/dev/null || true' EXIT
log "stress-ng: $cpus CPU worker(s) at normal priority (pid $hog)"
failed=0
for ((i = 1; i <= runs; i++)); do
	t=$SECONDS rc=0
	"$@" || rc=$?
	log "run $i of $runs: exit $rc in $((SECONDS - t)) s, under the hog"
	((rc == 0)) || failed=$((failed + 1))
done
log "$failed of $runs run(s) failed"
((failed == 0))
