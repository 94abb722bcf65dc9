#!/usr/bin/env bash
# vswitchd-events.sh: what one change costs ovs-vswitchd on a bridge of N ports.
#
#   sudo hack/vswitchd-events.sh [N]     (default 500; about 2 minutes)
#
# Starts a private sandbox (hack/ovs-sandbox.sh) with a bridge of N veth
# ports whose peers are up in netns of their own, as containers' are, then
# makes one change at a time, 3 times each, and prints how many full bridge
# reconfigurations ovs-vswitchd ran (its bridge_reconfigure coverage counter)
# and how much CPU it used (ticks of 10 ms) within WINDOW seconds (1.5), with
# the periodic statistics refresh turned off so that it does not blur them.
# The last rows are one ADD and one DEL of this suite's chain (ovs-bridge +
# host-local + ovs-portmap, one host port), executed as a runtime does.
# Cleans up on exit. docs/performance.md explains what the figures mean for
# the plugins.
#
# DATAPATH=netdev (default) or system (the kernel datapath: needs the
# openvswitch module; hack/ovs-vm.sh test events runs it in a virtual
# machine). OVSFLOW_BIN: a directory with the plugins already built (else
# they are built with go). ONLY=chain: only the chain's rows (and the idle
# one). RUNS: runs per row (3).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "vswitchd-events: needs root" >&2; exit 2; }
N=${1:-500}
DATAPATH=${DATAPATH:-netdev}
WINDOW=${WINDOW:-1.5}
ONLY=${ONLY:-}
RUNS=${RUNS:-3}
case $DATAPATH in netdev | system) ;; *) echo "vswitchd-events: DATAPATH=$DATAPATH: want netdev or system" >&2; exit 2 ;; esac
SB=ovsflow-ev$$
P=ev$$
work=$(mktemp -d /tmp/ovsflow-ev.XXXXXX)
trap 'rm -rf "$work"' EXIT
bin=${OVSFLOW_BIN:-$work/bin}
if [ -z "${OVSFLOW_BIN:-}" ]; then
	mkdir "$bin"
	PATH=$PATH:/usr/local/go/bin CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$bin" ./cmd/... \
		github.com/containernetworking/plugins/plugins/ipam/host-local
fi
eval "$(hack/ovs-sandbox.sh start "$SB")"
cleanup() {
	for i in $(seq 1 "$N") $(for k in $(seq 1 "$RUNS"); do echo "x$k y$k a$k"; done); do ip netns del "$P-$i" 2>/dev/null || true; done
	hack/ovs-sandbox.sh stop "$SB"
	rm -rf "$work"
}
trap cleanup EXIT
export OVS_RUNDIR=$RUNDIR
V="ovs-vsctl --db=$OVSDB --timeout=30"
$V add-br br0 -- set bridge br0 datapath_type="$DATAPATH"
# Without this, ovs-vswitchd refreshes the statistics of every interface
# every 5 s (about 0.5 s of its CPU at 500 ports), which would land on
# random rows. Production hosts keep the default; hack/bench.sh does too.
$V set open_vswitch . other_config:stats-update-interval=3600000

for i in $(seq 1 "$N"); do ip netns add "$P-$i"; done
for i in $(seq 1 "$N"); do echo "link add h$i netns $NETNS up type veth peer name eth0 netns $P-$i"; done | ip -batch -
for i in $(seq 1 "$N"); do ip -n "$P-$i" link set eth0 up; done
# As ovs-bridge isolates the host ends of a netdev bridge (link.Isolate). On
# a system bridge ovs-bridge does not, but the N ports in the background are
# isolated all the same: so that they are the same on both datapaths, and so
# that 500 links' IPv6 address configuration does not flood a guest under
# software emulation. The chain's ADD below does what ovs-bridge does.
for i in $(seq 1 "$N"); do
	echo "net.ipv4.conf.h$i.arp_ignore=8"
	echo "net.ipv6.conf.h$i.disable_ipv6=1"
done | ip netns exec "$NETNS" sysctl -q -p- >/dev/null
args=()
for i in $(seq 1 "$N"); do args+=(-- add-port br0 "h$i"); done
$V "${args[@]}"
sleep 20 # the new links' own IPv6 chatter (router solicitations, MLD) is over after about 10 s

ctl=$(ls "$RUNDIR"/ovs-vswitchd.*.ctl)
pid=$(cat "$RUNDIR/ovs-vswitchd.pid")
cpu() { awk '{print $14+$15}' "/proc/$pid/stat"; }
reconf() { ovs-appctl -t "$ctl" coverage/read-counter bridge_reconfigure; }
now() { date +%s%N; }
row() { # label, then the command (run RUNS times; $k is 1..RUNS)
	local label=$1 r c t0 ms=() rs=() cs=()
	shift
	case $ONLY:$label in :* | *:nothing* | *:"ADD of the chain"* | *:"DEL of the chain"*) ;; *) return 0 ;; esac
	for k in $(seq 1 "$RUNS"); do
		sleep "$WINDOW"
		r=$(reconf) c=$(cpu) t0=$(now)
		eval "$*"
		ms+=($((($(now) - t0) / 1000000)))
		sleep "$WINDOW"
		rs+=($(($(reconf) - r))) cs+=($(($(cpu) - c)))
	done
	printf '| %s | %s | %s | %s |\n' "$label" "${ms[*]}" "${rs[*]}" "${cs[*]}"
}

echo
# The chain, executed as a runtime does: ovs-bridge, then ovs-portmap with
# its result as prevResult; DEL in the reverse order.
cat >"$work/bridge.json" <<EOF
{"cniVersion": "1.0.0", "name": "ev", "type": "ovs-bridge", "bridge": "br0", "ovsdb": "$OVSDB", "isGateway": true,
 "ipam": {"type": "host-local", "dataDir": "$work/ipam", "ranges": [[{"subnet": "203.0.113.0/24", "gateway": "203.0.113.1"}]]}}
EOF
plugin() { # command, container, plugin; config on stdin
	ip netns exec "$NETNS" env CNI_COMMAND="$1" CNI_CONTAINERID="$2" CNI_NETNS="/run/netns/$P-$2" CNI_IFNAME=eth0 \
		CNI_PATH="$bin" "$bin/$3"
}
portmap_conf() { # [hostPort prevResult]: without them, DEL's config
	local extra=
	if [ -n "${1:-}" ]; then
		extra=', "runtimeConfig": {"portMappings": [{"hostPort": '$1', "containerPort": 80, "protocol": "tcp"}]}, "prevResult": '$2
	fi
	printf '{"cniVersion": "1.0.0", "name": "ev", "type": "ovs-portmap", "ovsdb": "%s"%s}' "$OVSDB" "$extra"
}
chain_add() { # container (its netns is $P-container), host port
	local res
	res=$(plugin ADD "$1" ovs-bridge <"$work/bridge.json")
	portmap_conf "$2" "$res" | plugin ADD "$1" ovs-portmap >/dev/null
}
chain_del() { # container
	portmap_conf | plugin DEL "$1" ovs-portmap
	plugin DEL "$1" ovs-bridge <"$work/bridge.json"
}

echo "ovs-vswitchd, bridge of $N veth ports ($DATAPATH datapath); $RUNS runs each, ${WINDOW} s windows"
echo
echo "| change | command ms | reconfigurations | ovs-vswitchd CPU ticks (10 ms) |"
echo "|---|---|---|---|"
row "nothing (idle for the window)" ":"
row "ovs-ofctl dump-flows (exec, hello, one request)" 'ovs-ofctl -O OpenFlow14 dump-flows br0 >/dev/null'
row "Port external_ids set (ovsdb, no wait)" '$V --no-wait set port h1 external_ids:k=v$k$RANDOM'
row "veth created, not attached" 'ip netns add $P-x$k; ip link add x$k netns $NETNS up type veth peer name eth0 netns $P-x$k'
row "its container end up (carrier)" 'ip -n $P-x$k link set eth0 up'
row "add-port of it (waits for ovs-vswitchd)" '$V add-port br0 x$k'
row "an attached port's container end down" 'ip -n $P-$(((k - 1) % N + 1)) link set eth0 down'
row "... and up again" 'ip -n $P-$(((k - 1) % N + 1)) link set eth0 up'
row "del-port (waits for ovs-vswitchd)" '$V del-port br0 x$k'
row "an unattached veth deleted" 'ip netns del $P-x$k'
row "veth created up and promiscuous, container end up" 'ip netns add $P-y$k; ip link add y$k netns $NETNS up promisc on type veth peer name eth0 netns $P-y$k; ip -n $P-y$k link set eth0 up'
row "add-port of it (already promiscuous: the datapath changes nothing)" '$V add-port br0 y$k'
row "one broadcast from a container, flooded" 'ip netns exec $P-$(((k - 1) % N + 1)) ping -q -b -c 1 -W 0.1 255.255.255.255 >/dev/null 2>&1 || true'
for k in $(seq 1 "$RUNS"); do ip netns add "$P-a$k"; done
row "ADD of the chain (ovs-bridge + host-local + ovs-portmap, one host port)" 'chain_add a$k $((8000 + k))'
row "DEL of the chain" 'chain_del a$k'
