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
go vet -tags libofcodec ./pkg/openflow # the libOpenflow prototype of docs/design.md stays buildable
(cd hack/bench && go vet ./...) # the benchmark is a module of its own
(cd test/cluster && go vet ./...) # so are the cluster tests (client-go stays out of the plugins' module)
(cd test/cluster && go test -count=1 ./scale/... ./conformance/... ./harness/...) # their tools' unit tests (the cluster's need one: below)
echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi

echo "== go test (unit and end-to-end)"
# -p 1: the end-to-end packages each start their own Open vSwitch sandbox;
# running them one at a time keeps a 2-core machine responsive.
go test -count=1 -p 1 -timeout 30m "$@" ./...

echo "== ovs-in-docker (multi-node: nodes as Docker containers, hack/ovs-in-docker.sh; then with Kubernetes)"
if [ "$(id -u)" = 0 ]; then
	hack/ovs-in-docker.sh test
	# A Kubernetes cluster of two nodes in Docker: the DaemonSet, Kubernetes'
	# own HostPort, Networking Granular Checks: Pods, Conntrack and DNS tests
	# (e2e.test), then test/cluster.
	hack/ovs-in-docker.sh test -kube -nodes 2 -conformance
elif [ -n "${CI:-}" ]; then
	echo "ovs-in-docker needs root in CI" >&2; exit 1
else
	echo "*** not root: hack/ovs-in-docker.sh test SKIPPED ***" >&2
fi
