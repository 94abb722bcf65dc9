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
	inhost nft delete table ip ovsflow_hostport 2>/dev/null
	inhost nft delete table ip6 ovsflow_hostport 2>/dev/null
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

say "preparing the OVS host: bridge br-demo, node address 198.51.100.1 on its internal port, an uplink to netns demo-out"
inhost ovs-vsctl --db="$OVSDB" -- --may-exist add-br br-demo -- set bridge br-demo datapath_type=netdev
inhost ip addr add 198.51.100.1/24 dev br-demo
inhost ip addr add 2001:db8:100::1/64 dev br-demo nodad
inhost ip link set br-demo up
ip netns add demo-out
inhost ip link add uplink type veth peer name eth0 netns demo-out
inhost sysctl -qw net.ipv4.conf.uplink.arp_ignore=8 net.ipv6.conf.uplink.disable_ipv6=1
inhost ip link set uplink up
inhost ovs-vsctl --db="$OVSDB" add-port br-demo uplink
ip -n demo-out addr add 198.51.100.2/24 dev eth0
ip -n demo-out link set eth0 up
ip netns exec demo-out ethtool -K eth0 tx off >/dev/null

say "attaching two containers; A publishes host port 8080 -> its port 80"
ip netns add demo-a
ip netns add demo-b
inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" CNI_CACHE_DIR="$WORK/cache" \
	CAP_ARGS='{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}' \
	"$WORK/bin/cnitool" add demo /run/netns/demo-a | tee "$WORK/demo-a.json"
inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" CNI_CACHE_DIR="$WORK/cache" \
	"$WORK/bin/cnitool" add demo /run/netns/demo-b >"$WORK/demo-b.json"
B=$(ip -n demo-b -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1)
echo
inhost ovs-vsctl --db="$OVSDB" show

say "ping A -> B ($B) and A -> gateway"
ip netns exec demo-a ping -c 2 -W 2 "$B"
ip netns exec demo-a ping -c 1 -W 2 192.0.2.1

say "the host port: outside (198.51.100.2) -> 198.51.100.1:8080 -> container A:80"
mkdir -p "$WORK/www" && echo "hello from container A" >"$WORK/www/index.html"
ip netns exec demo-a python3 -m http.server 80 --bind 0.0.0.0 --directory "$WORK/www" >/dev/null 2>&1 &
HTTPD=$!
ip -n demo-a link set lo up
for _ in $(seq 50); do ip netns exec demo-a timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/80' 2>/dev/null && break; sleep 0.1; done
reply=$(ip netns exec demo-out timeout 5 bash -c 'exec 3<>/dev/tcp/198.51.100.1/8080; printf "GET / HTTP/1.0\r\n\r\n" >&3; cat <&3')
echo "$reply" | tail -1
kill $HTTPD 2>/dev/null; wait $HTTPD 2>/dev/null || true
grep -q "hello from container A" <<<"$reply"
echo
echo "flows of ours (cookie 0x0fc5...):"
inhost ovs-ofctl --no-names -O OpenFlow14 --no-stats dump-flows "unix:$RUNDIR/br-demo.mgmt" cookie=0x0fc5000000000000/0xffff000000000000 | sed 's/^/  /'

say "tearing down"
for c in demo-a demo-b; do
	inhost env CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" CNI_CACHE_DIR="$WORK/cache" \
		"$WORK/bin/cnitool" del demo /run/netns/$c
	ip netns del $c
done
left=$(inhost ovs-vsctl --db="$OVSDB" --no-headings -f csv --columns=name find Port external_ids:ovsflow.io/owner=ovsflow-cni)
veths=$(inhost ip -o link show | grep -c ' ovf' || true)
ips=$(find "$WORK/ipam" -type f -name '192.*' 2>/dev/null | wc -l)
flows=$(inhost ovs-ofctl --no-names -O OpenFlow14 --no-stats dump-flows "unix:$RUNDIR/br-demo.mgmt" cookie=0x0fc5010000000000/0xffffff0000000000 | grep -c cookie= || true)
nft=$(inhost nft list map ip ovsflow_hostport hostports 2>/dev/null | grep -c 'elements = ' || true)
echo "ports of ours left: ${left:-none}; veths: $veths; IP allocations: $ips; attachment flows: $flows; node-local nft elements: $nft"
[ -z "$left" ] && [ "$veths" = 0 ] && [ "$ips" = 0 ] && [ "$flows" = 0 ] && [ "$nft" = 0 ]
say "demo OK"
