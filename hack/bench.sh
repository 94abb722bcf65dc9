#!/usr/bin/env bash
# bench.sh: this suite's CNI chain against the reference chain, side by side in
# one run, driven by the same in-process libcni driver (hack/bench), interleaved.
#
#   sudo hack/bench.sh            N = 1, 10, 50, 110, 200, 500; 9-16 minutes on 2 loaded cores
#   sudo hack/bench.sh -quick     N = 1 and 50; about 2 minutes (CI: no time is asserted;
#                                 it fails when an ADD or DEL fails or a host port check fails)
#   sudo hack/bench.sh -bandwidth -levels 1,50   only ovs-bandwidth's chain against the reference
#                                 bandwidth plugin's (ADD and DEL, both directions limited)
#   sudo hack/bench.sh -record docs/figures [ARGS...]   the report also into docs/figures/bench-DATE.md (-record F.md: into F.md)
#   sudo hack/bench.sh ARGS...    any other flags go to the driver (cd hack/bench && go run . -h)
#   hack/bench.sh -h              this text (installs and starts nothing)
#
# Chain A: ovs-bridge + host-local + ovs-portmap on a private Open vSwitch
# (hack/ovs-sandbox.sh, userspace netdev datapath). Chains B and C: the
# reference bridge + host-local + portmap (containernetworking/plugins, a tool
# dependency in go.mod), iptables and nftables backends, each in a network
# namespace of its own. Chain F: the Open vSwitch floor, a veth attached to
# chain A's bridge with a bare ovs-vsctl add-port, and host-local. Everything runs inside namespaces made for the run:
# the host's iptables, nftables, /var/lib/cni and Open vSwitch are never
# touched. Prints tables, then one line starting with "BENCH" (docs/performance.md).
#
# To measure a change: build it into a directory and add it as chain P, on a
# second bridge of the same Open vSwitch, interleaved with A:
#   sudo hack/bench.sh -chains A,P -proto DIR -levels 1 -reps 40 -parallel-to 8
# BENCH_OURS_DIR=DIR takes chain A's ovs-bridge and ovs-portmap from DIR instead
# of this tree (so that A and P can be two builds of the same commit).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

case ${1:-} in
-h | -help | --help)
	# The usage is the header above; nothing is installed or started.
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
esac

# -record DIR (first): the report (stdout) is also written to
# DIR/bench-DATE.md (docs/figures: the figures docs/performance.md reads);
# -record FILE.md: to that file.
record=
if [ "${1:-}" = -record ]; then
	record=${2:?-record needs a directory}
	shift 2
fi

if [ "$(id -u)" != 0 ]; then
	echo "bench.sh: needs root (network namespaces, Open vSwitch, netfilter)" >&2
	exit 1
fi
hack/ovs-sandbox.sh install
log() { echo "bench.sh: $*" >&2; }
# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh
apt_install iptables nftables

work=$(mktemp -d /tmp/ovsflow-bench.XXXXXX)
name=ovsflow-bench-$$
cleanup() {
	hack/ovs-sandbox.sh stop "$name" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "== building" >&2
mkdir -p "$work/bin"
# Release flags, the same for both chains (the upstream plugins' release
# build is static too): no cgo, no symbol table, no paths.
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/bin" ./cmd/... \
	github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/meta/portmap \
	github.com/containernetworking/plugins/plugins/meta/bandwidth
# The driver is a module of its own (hack/bench/go.mod), on this checkout.
(cd hack/bench && go build -o "$work/bench" . && go build -o "$work/rssshim" ./rssshim)
if [ -n "${BENCH_OURS_DIR:-}" ]; then
	cp "$BENCH_OURS_DIR/ovs-bridge" "$BENCH_OURS_DIR/ovs-portmap" "$work/bin/"
fi

echo "== starting the Open vSwitch sandbox $name" >&2
vars=$(hack/ovs-sandbox.sh start "$name")
OVSDB=$(sed -n 's/^OVSDB=//p' <<<"$vars")
NETNS=$(sed -n 's/^NETNS=//p' <<<"$vars")

if [ -n "$record" ]; then
	[[ $record == *.md ]] || record=$record/bench-$(date -u +%F).md
	mkdir -p "$(dirname "$record")"
	exec > >(tee "$record")
fi
echo "# ovsflow benchmark"
echo
echo "- date: $(date -u +%FT%TZ); tree: $(git describe --always --dirty 2>/dev/null || echo unknown)${BENCH_OURS_DIR:+; ovs-* binaries from $BENCH_OURS_DIR}"
echo "- machine: $(nproc) CPUs, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- $(ovs-vswitchd --version | head -1); $(iptables --version); $(nft --version); $(go version | cut -d' ' -f3)"
echo "- command: hack/bench.sh $*"

# The driver runs inside the sandbox netns (chain A's node). ip netns exec
# also gives it a mount namespace of its own, so the netns mounts it makes
# under $work are invisible outside and vanish with it.
ip netns exec "$NETNS" "$work/bench" -bin "$work/bin" -shim "$work/rssshim" -ovsdb "$OVSDB" -work "$work" "$@"
