#!/usr/bin/env bash
# test.sh: the whole test suite. Unit tests need nothing; the end-to-end suites
# (test/...) need root: they start a private Open vSwitch (hack/ovs-sandbox.sh),
# install it with apt-get when missing, and skip loudly when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

if [ "$(id -u)" = 0 ]; then
	hack/ovs-sandbox.sh install
	hack/install-runtimes.sh # containerd, podman, CRI-O, crictl, cnitool and images for test/runtimes
else
	echo "*** not root: the end-to-end suites will be SKIPPED ***" >&2
fi

echo "== go vet"
go vet ./...
(cd hack/bench && go vet ./...) # the benchmark is a module of its own
(cd test/cluster && go vet ./...) # so are the cluster tests (client-go stays out of the plugins' module)
(cd test/cluster && go test -count=1 ./scale/... ./conformance/... ./harness/...) # their tools' unit tests (the cluster's need one: below)
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi

# The multi-node suites (nodes as Docker containers, hack/ovs-in-docker.sh;
# then with Kubernetes) wait on their clusters more than they compute (about
# half the CPUs), so they run in the background, beside go test, with their
# output printed when they end. They touch nothing go test's suites use:
# their nodes are containers of a private Docker engine, with their own
# network namespaces and Open vSwitch. OVSFLOW_TEST_SERIAL=1 runs them after
# go test instead.
# The CRI-O cluster is a second harness beside the first (a prefix, engine,
# network and ranges of its own: documentation and benchmark ranges no other
# suite uses), so that it waits on its cluster while the first waits on
# its own.
cluster_log=$(mktemp /tmp/ovsflow-test-cluster.XXXXXX)
crio_log=$(mktemp /tmp/ovsflow-test-crio.XXXXXX)
cluster= crio=
trap '[ -z "$cluster" ] || kill -- -"$cluster" 2>/dev/null || true; [ -z "$crio" ] || kill -- -"$crio" 2>/dev/null || true; rm -f "$cluster_log" "$crio_log"' EXIT
clusters() {
	echo "== ovs-in-docker (multi-node: nodes as Docker containers, hack/ovs-in-docker.sh; then with Kubernetes)"
	hack/ovs-in-docker.sh test
	# A Kubernetes cluster of three nodes in Docker on two subnets behind a
	# router (n1 and n3 on one: host-gw between them; n2 on the other: the
	# node agent's tunnel; the CRI-O cluster below is on one): the DaemonSet, Kubernetes' own
	# HostPort, Networking Granular Checks: Pods, Conntrack and DNS tests
	# (e2e.test), then test/cluster, the overlay's tests among them.
	hack/ovs-in-docker.sh test -kube -nodes 3 -subnets 2 -conformance
}
crio_cluster() {
	echo "== ovs-in-docker with Kubernetes on CRI-O nodes"
	# The same on two CRI-O nodes (without ovs-portmap's host-port tests:
	# CRI-O publishes host ports itself).
	env OID_PREFIX=ovsflow-crio OID_NET4=198.18.6.0/27 OID_NET6=2001:db8:40::/64 OID_POD4=198.18.4.0/24 OID_POD6=2001:db8:40 \
		OID_KPOD6=2001:db8:40:100::/56 OID_SVC4=198.18.5.0/27 OID_SVC6=2001:db8:40:ffff::/112 \
		hack/ovs-in-docker.sh test -kube -nodes 2 -runtime crio -conformance
}
if [ "$(id -u)" != 0 ]; then
	[ -z "${CI:-}" ] || { echo "ovs-in-docker needs root in CI" >&2; exit 1; }
	echo "*** not root: hack/ovs-in-docker.sh test SKIPPED ***" >&2
elif [ -z "${OVSFLOW_TEST_SERIAL:-}" ]; then
	export -f clusters crio_cluster
	setsid bash -c 'set -euo pipefail; clusters' >"$cluster_log" 2>&1 &
	cluster=$!
	setsid bash -c 'set -euo pipefail; crio_cluster' >"$crio_log" 2>&1 &
	crio=$!
fi

echo "== go test (unit and end-to-end)"
# -p 1: the end-to-end packages each start their own Open vSwitch sandbox;
# running them one at a time keeps a 2-core machine responsive.
rc=0
go test -count=1 -p 1 -timeout 30m "$@" ./... || rc=$?

# collect PID LOG WHAT: waits for a suite in the background, prints its
# log and how it ended, and keeps its failure in rc.
collect() {
	local crc=0
	wait "$1" || crc=$?
	cat "$2"
	echo "== $3 (in the background, beside go test): exit $crc"
	((crc == 0)) || rc=$crc
}
if [ -n "$cluster" ]; then
	collect "$cluster" "$cluster_log" ovs-in-docker
	cluster=
	collect "$crio" "$crio_log" "ovs-in-docker on CRI-O"
	crio=
elif [ "$(id -u)" = 0 ]; then
	clusters || rc=$?
	crio_cluster || rc=$?
fi
exit $rc
