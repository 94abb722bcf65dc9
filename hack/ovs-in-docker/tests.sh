# tests.sh: `hack/ovs-in-docker.sh test` and `demo`, sourced by
# hack/ovs-in-docker.sh (its helpers and names). The tests are Go
# (test/multinode): test runs up, `go test -v` of that package with the
# nodes handed over in its environment, and down; it ends with
# "N passed, M failed" (tests without subtests and subtests; a skip counts
# as a failure). OID_KEEP=1 leaves the nodes up after; OID_RUN: a -run
# pattern (the tests to run).

cmd_test() {
	local n=3 kube=0 conf=0
	while (($#)); do
		case $1 in
		-nodes) n=$2; shift 2 ;;
		-kube) kube=1; shift ;;
		-conformance) conf=1; shift ;;
		*) die "test: unknown argument $1" ;;
		esac
	done
	((kube)) && { kube_test "$n" "$conf"; return; }
	((!conf)) || die "test: -conformance goes with -kube"
	((n >= 2)) || die "test: -nodes $n: want at least 2"
	local t0=$SECONDS f up
	f=$(mktemp)
	cmd_up -nodes "$n" >"$f" || { rm -f "$f"; die "up failed"; }
	up=$(cat "$f")
	rm -f "$f"
	echo "$up"
	local tup=$SECONDS
	if [ "${OID_KEEP:-}" != 1 ]; then trap 'cmd_down >/dev/null 2>&1 || true' EXIT; fi
	local out rc=0
	out=$(mktemp)
	OVSFLOW_MULTINODE_NODES=$up OVSFLOW_MULTINODE_VERSION=$(version) OVSFLOW_MULTINODE_PREFIX=$P \
		OVSFLOW_MULTINODE_HARNESS=$PWD/hack/ovs-in-docker.sh \
		go test -count=1 -v -timeout 30m ${OID_RUN:+-run "$OID_RUN"} ./test/multinode/ | tee "$out" || rc=$?
	local npass nfail nskip
	read -r npass nfail nskip < <(go_test_counts <"$out")
	rm -f "$out"
	((rc == 0 || nfail + nskip > 0)) || nfail=1 # go test failed outside any test (build, TestMain)
	echo "$npass passed, $((nfail + nskip)) failed$( ((nskip)) && echo " ($nskip skipped)") ($((SECONDS - tup)) s of tests, $((tup - t0)) s of up)"
	((rc == 0 && nfail + nskip == 0))
}

# go_test_counts: `go test -v` output on stdin; prints the passed, failed
# and skipped counts of the tests without subtests and of the subtests.
go_test_counts() {
	awk '$1 == "---" && ($2 == "PASS:" || $2 == "FAIL:" || $2 == "SKIP:") { st[$3] = $2; name[++k] = $3 }
	END {
		for (i = 1; i <= k; i++) {
			leaf = 1
			for (j = 1; j <= k; j++) if (index(name[j], name[i] "/") == 1) { leaf = 0; break }
			if (!leaf) continue
			if (st[name[i]] == "PASS:") p++; else if (st[name[i]] == "FAIL:") f++; else s++
		}
		printf "%d %d %d\n", p, f, s
	}'
}

# step CMD...: prints the command (as typed at the Docker host) and its output.
step() {
	printf '$'
	printf ' %q' "$@"
	echo
	"$@" 2>&1 | sed 's/^/  /'
}

cmd_demo() {
	local n1v4 n2v4
	if [ "${1:-}" = -kube ]; then
		shift
		local n=3
		[ "${1:-}" = -nodes ] && n=$2
		kube_demo "$n"
		return
	fi
	echo "# Two nodes: Docker containers running Open vSwitch, containerd (CRI) and the plugins."
	cmd_up -nodes 2 || die "up failed"
	trap 'echo "# Removing everything."; cmd_down' EXIT
	n1v4=$(node4 1) n2v4=$(node4 2)
	echo
	echo "# Each node's conflist, rendered by install-cni.sh from the node's pod CIDRs:"
	step "$0" exec n1 grep -A1 '"gateway"' /etc/cni/net.d/10-ovsflow.conflist
	step "$0" exec n2 grep -A1 '"gateway"' /etc/cni/net.d/10-ovsflow.conflist
	echo
	echo "# A pod with hostPort 8080 -> 80 on each node (crictl runp with port_mappings: CNI ADD):"
	step "$0" exec n1 oid-pod run web-n1 8080:80
	step "$0" exec n2 oid-pod run web-n2 8080:80
	echo
	echo "# The Docker host reaches each node's host port (the pod sees this host's address):"
	step timeout 5 bash -c "exec 3<>/dev/tcp/$n1v4/8080 && head -1 <&3"
	step timeout 5 bash -c "exec 3<>/dev/tcp/$n2v4/8080 && head -1 <&3"
	echo
	echo "# Across nodes: n2 reaches n1's host port, n1 reaches n2's (the pods see the other node's address):"
	step "$0" exec n2 timeout 5 bash -c "exec 3<>/dev/tcp/$n1v4/8080 && head -1 <&3"
	step "$0" exec n1 timeout 5 bash -c "exec 3<>/dev/tcp/$n2v4/8080 && head -1 <&3"
	echo
	echo "# The flows ovs-portmap wrote on n1 for web-n1's host port:"
	step "$0" exec n1 sh -c "ovs-ofctl dump-flows br0 --no-stats | grep 'tp_dst=8080' | cut -c1-150"
	echo
	echo "# Pods removed (CNI DEL):"
	step "$0" exec n1 oid-pod rm web-n1
	step "$0" exec n2 oid-pod rm web-n2
}
