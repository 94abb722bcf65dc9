#!/usr/bin/env bash
# resilience.sh: the resilience figures: fuzzing, injected faults, leaks (docs/resilience.md).
#
#   sudo hack/resilience.sh
#
# 1. runs every Go fuzz target of pkg/ for a fixed time each (FUZZTIME, 10s
#    by default; one target per `go test -fuzz` invocation, as Go requires);
# 2. runs the resilience suite (test/resilience, root: a private Open vSwitch
#    sandbox): SIGKILL at random points of ADD, OVSDB and ovs-vswitchd down,
#    a storm of concurrent ADD/CHECK/DEL with kills then GC, malformed and
#    hostile input, foreign ports/flows/nft tables;
# 3. prints the figures: load held, faults injected and survived, malformed
#    inputs tried, fuzz executions, leaked objects (must be 0).
#
# Exits non-zero if a fuzz target or a test fails or anything leaked. A
# failing input found by the fuzzer is written under pkg/*/testdata/fuzz/ by
# `go test` (keep it: it is the regression test).
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
FUZZTIME=${FUZZTIME:-10s}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
start=$SECONDS

# --- 1. fuzz targets, found in the source so that new ones are included.
echo "== fuzzing each target for $FUZZTIME"
fuzz_total=0 fuzz_targets=0 fuzz_failed=()
while read -r dir name; do
	out=$work/fuzz-$(basename "$dir")-$name.log
	t0=$SECONDS
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "./$dir" >"$out" 2>&1
	rc=$?
	if [ $rc -ne 0 ] && ! grep -q 'Failing input written' "$out"; then
		# No input to blame: the fuzzing engine itself failed. Go's fuzz
		# coordinator can report its own -fuzztime deadline as a failure
		# ("context deadline exceeded", go.dev/issue/75804, fixed in Go 1.27)
		# when a loaded machine delays a worker. Say so, and run the target
		# again for as many executions as the first run reached: a count
		# has no deadline to race. A second failure counts.
		first=$(grep -o 'execs: [0-9]*' "$out" | tail -1 | grep -o '[0-9]*' || true)
		[ "${first:-0}" -ge 1000 ] || first=100000
		echo "  $dir.$name: the fuzzing engine failed without an input; running it again for $first executions:"
		grep -E -v '^fuzz: elapsed' "$out" | head -8 | sed 's/^/      /'
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "${first}x" "./$dir" >"$out" 2>&1
		rc=$?
	fi
	# the last progress line: "fuzz: elapsed: 10s, execs: 123456 (12345/sec), ..."
	execs=$(grep -o 'execs: [0-9]*' "$out" | tail -1 | grep -o '[0-9]*' || true)
	execs=${execs:-0}
	fuzz_total=$((fuzz_total + execs))
	fuzz_targets=$((fuzz_targets + 1))
	if [ $rc -ne 0 ]; then
		status=1
		fuzz_failed+=("$dir.$name")
		printf '  %-34s FAIL after %6d execs (%ds)\n' "$dir.$name" "$execs" $((SECONDS - t0))
		grep -E -v '^fuzz: elapsed' "$out" | head -20 | sed 's/^/      /'
	else
		printf '  %-34s ok   %9d execs (%ds)\n' "$dir.$name" "$execs" $((SECONDS - t0))
	fi
done < <(grep -o '^func Fuzz[A-Za-z0-9_]*' pkg/*/*_test.go | sed 's|/[^/]*_test.go:func | |' | sort -u)

# --- 2. the resilience suite.
echo "== resilience suite (test/resilience)"
suite=$work/suite.log
if [ "$(id -u)" != 0 ]; then
	echo "*** not root: the resilience suite needs root; SKIPPED ***" >&2
	status=1
else
	hack/ovs-sandbox.sh install
	t0=$SECONDS
	OVSFLOW_RESILIENCE=1 go test -count=1 -v -timeout 15m ./test/resilience/ >"$suite" 2>&1
	rc=$?
	grep -E '^(=== RUN|--- (PASS|FAIL)|    --- FAIL)' "$suite" | grep -v '^=== RUN' | sed 's/^/  /'
	echo "  suite: exit $rc in $((SECONDS - t0))s (full log kept only on failure: see below)"
	if [ $rc -ne 0 ]; then
		status=1
		cp "$suite" /tmp/ovsflow-resilience.log
		echo "  failures: /tmp/ovsflow-resilience.log"
		grep -E '^\s+[a-z_]+_test\.go:[0-9]+: ' "$suite" | grep -v FIGURE | cut -c1-300 | head -40 | sed 's/^/    /'
	fi
fi

# --- 3. figures.
fig() { # fig NAME KEY: the value of KEY on the FIGURE NAME line
	grep -h "^FIGURE $1 " "$suite" 2>/dev/null | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}
n() { local v; v=$(fig "$@"); echo "${v:-0}"; }

crash_att=$(n crash attempted) crash_killed=$(n crash killed) crash_surv=$(n crash survived)
storm_callers=$(n storm callers) storm_att=$(n storm attempted) storm_ok=$(n storm succeeded)
storm_killed=$(n storm killed) storm_surv=$(n storm survived) storm_cycles=$(n storm cycles)
storm_live=$(n storm live) storm_traffic=$(n storm traffic_ok) storm_gc=$(n storm gc_removed)
db_inj=$(n ovsdb_down injected) db_surv=$(n ovsdb_down survived)
vs_inj=$(n vswitchd_down injected) vs_surv=$(n vswitchd_down survived)
mal_tried=$(n malformed tried) mal_ok=$(n malformed rejected_as_expected) mal_valid=$(n malformed valid_accepted)
own_cmds=$(n ownership commands) own_changed=$(n ownership foreign_changed)
leaked=$(($(n crash leaked) + $(n storm leaked) + $(n storm missing) + $(n ovsdb_down leaked) + $(n vswitchd_down leaked) +
	$(n malformed leaked) + $(n gc_interrupted_del leaked) + own_changed))
injected=$((crash_killed + storm_killed + db_inj + vs_inj))
survived=$((crash_surv + storm_surv + db_surv + vs_surv))

cat <<EOF

== resilience figures
load held:            $storm_callers concurrent callers x $storm_att operations ($storm_cycles ADD/CHECK/DEL cycles, $storm_ok succeeded, $storm_killed plugin invocations SIGKILLed); after GC: $storm_live live attachments, $storm_traffic host port connections from outside OK, $storm_gc forgotten attachments removed by GC
faults injected:      $injected (SIGKILL during ADD: $crash_killed of $crash_att trials; storm kills: $storm_killed; ovsdb-server down: $db_inj; ovs-vswitchd down: $vs_inj)
faults survived:      $survived of $injected
malformed inputs:     $mal_tried tried through the binaries ($mal_ok rejected with the right code and field, $mal_valid valid-but-odd accepted)
ownership:            $own_cmds commands, foreign ports/flows/nft changed: $own_changed
fuzz executions:      $fuzz_total over $fuzz_targets targets ($FUZZTIME each)${fuzz_failed[*]:+; FAILED: ${fuzz_failed[*]}}
leaked objects:       $leaked
time:                 $((SECONDS - start))s
EOF
grep -h '^FIGURE ' "$suite" 2>/dev/null | sed 's/^/  /'
[ "$leaked" = 0 ] || status=1
exit $status
