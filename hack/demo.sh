#!/usr/bin/env bash
# demo.sh: the suite on a private Open vSwitch, end to end, driven by cnitool
# (libcni, as a runtime drives it). Needs root; installs Open vSwitch if missing.
#
#  1. starts an OVS sandbox (hack/ovs-sandbox.sh) and builds the plugins
#  2. attaches two containers (network namespaces) to bridge br-demo
#     (created by ovs-bridge) and pings between them and the gateway
#  3. publishes container A's port 80 as host port 8080 (ovs-portmap) and
#     reaches it from an "outside" namespace wired to the bridge's uplink
#  4. tears everything down and shows that nothing is left
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
[ "$(id -u)" = 0 ] || { echo "demo.sh: needs root (network namespaces, Open vSwitch)" >&2; exit 1; }

SB=ovsflow-demo
WORK=$(mktemp -d /tmp/ovsflow-demo.XXXXXX)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
inhost() { ip netns exec "$SB" "$@"; }

cleanup() {
	set +e
	for c in demo-a demo-b; do
		[ -e /run/netns/$c ] && inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" \
			CNI_CACHE_DIR="$WORK/cache" "$WORK/bin/cnitool" del demo "/run/netns/$c" >/dev/null 2>&1
		ip netns del $c 2>/dev/null
	done
	ip netns del demo-out 2>/dev/null
	hack/ovs-sandbox.sh stop "$SB"
	rm -rf "$WORK"
}
trap cleanup EXIT

say "starting a private Open vSwitch in netns $SB"
eval "$(hack/ovs-sandbox.sh start "$SB")"
echo "ovsdb endpoint: $OVSDB"

say "building the plugins"
mkdir -p "$WORK/bin"
go build -o "$WORK/bin" ./cmd/... github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/cni/cnitool
ls "$WORK/bin"

mkdir -p "$WORK/net.d"
sed -e "s|unix:/var/run/openvswitch/db.sock|$OVSDB|" -e "s|/var/lib/cni/networks|$WORK/ipam|" \
	examples/demo.conflist >"$WORK/net.d/demo.conflist"
say "conflist ($WORK/net.d/demo.conflist)"
cat "$WORK/net.d/demo.conflist"

cni() { inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" CNI_CACHE_DIR="$WORK/cache" "$@" "$WORK/bin/cnitool"; }

say "attaching two containers"
for c in demo-a demo-b; do
	ip netns add $c
	inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" CNI_CACHE_DIR="$WORK/cache" \
		CAP_ARGS='{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}' \
		"$WORK/bin/cnitool" add demo /run/netns/$c | tee "$WORK/$c.json"
done
B=$(ip -n demo-b -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1)
echo
inhost ovs-vsctl --db="$OVSDB" show

say "ping A -> B ($B) and A -> gateway"
ip netns exec demo-a ping -c 2 -W 2 "$B"
ip netns exec demo-a ping -c 1 -W 2 192.0.2.1

say "tearing down"
for c in demo-a demo-b; do
	inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" CNI_CACHE_DIR="$WORK/cache" \
		"$WORK/bin/cnitool" del demo /run/netns/$c
	ip netns del $c
done
left=$(inhost ovs-vsctl --db="$OVSDB" --no-headings -f csv --columns=name find Port external_ids:ovsflow.io/owner=ovsflow-cni)
veths=$(inhost ip -o link show | grep -c ' ovf' || true)
ips=$(find "$WORK/ipam" -type f -name '192.*' 2>/dev/null | wc -l)
echo "ports of ours left: ${left:-none}; veths left: $veths; IP allocations left: $ips"
[ -z "$left" ] && [ "$veths" = 0 ] && [ "$ips" = 0 ]
say "demo OK"
