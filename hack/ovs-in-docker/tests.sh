# tests.sh: `hack/ovs-in-docker.sh test` and `demo`, sourced by
# hack/ovs-in-docker.sh (its helpers and names). The tests are Go and the
# harness's tool runs them (test/cluster/harness/cli/test.go): without
# -kube test/multinode (up, `go test -v` of that package with the nodes
# handed over in its environment, down; "N passed, M failed": tests without
# subtests and subtests, a skip counts as a failure); with -kube
# test/cluster (up -kube, deploy, -conformance, the tests, Multus in front
# and its tests, down). OID_KEEP=1 leaves the nodes up after; OID_RUN: a
# -run pattern (the tests to run).

cmd_test() { oid test "$@"; }

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
