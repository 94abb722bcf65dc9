#!/bin/sh
# node-prep.sh: prepares a node for the ovsflow plugins (deploy/README.md,
# "What each node must have"): the bridge with fail_mode=secure and the
# suite's base flow (table 0's NORMAL), the uplink as one of its ports,
# the node's addresses and routes moved from the uplink to the bridge's
# internal interface, the uplink kept off the node's IP stack on the
# userspace datapath, and IP forwarding on with ICMP redirects off. Run it
# as root on the node, once Open vSwitch runs (ovs-vsctl answers), after
# every boot. Idempotent: a second run changes nothing.
#
#   node-prep.sh [BRIDGE [UPLINK]]      defaults: br0 and the interface of the default route
#
# Environment:
#   DATAPATH     system | netdev | auto (default: system when the openvswitch kernel
#                module is loaded, else netdev, the userspace datapath)
#   OVS_PORTMAP  the ovs-portmap binary (default: /opt/cni/bin/ovs-portmap, ovs-portmap
#                in PATH, /opt/ovsflow/bin/ovs-portmap: the DaemonSet image's)
#   OVS_RUNDIR   Open vSwitch's run directory, where db.sock is (default
#                /var/run/openvswitch; ovs-vsctl reads the same variable)
#
# fail_mode=secure: with Open vSwitch's default (standalone) ovs-vswitchd
# forwards everything with a NORMAL flow of its own from the moment it
# restarts, port security included off, until reconcile has put the flows
# back. A secure bridge forwards nothing without flows, so the bridge is
# tagged as the suite's (external_ids ovsflow.io/owner) and `ovs-portmap
# reconcile` installs the suite's base flow (flows.BaseFlows: the one
# definition of it) before the uplink is added, and restores it after every
# ovs-vswitchd restart (the DaemonSet's agent, or
# deploy/systemd/ovs-portmap-reconcile.service); this script runs it once
# too, so a rebooted node has its uplink back without waiting for them.
# Turning an existing standalone bridge secure flushes its flows (Open
# vSwitch does so on every fail_mode change); the reconcile that follows
# puts them back at once.
#
# On the userspace datapath (netdev), every port of the bridge is still a
# kernel interface and the kernel sees its frames too: with default sysctls
# it answers ARP for the node's address on the uplink with the uplink's MAC,
# and the first connection to a host port is then refused by the node's own
# stack (RST). So on netdev the uplink gets arp_ignore=8 and IPv6 off, and
# the bridge a MAC of its own (never the uplink's). Container ports get the
# same from ovs-bridge. Senders on the uplink's network must not leave TCP
# and UDP checksums to offload either (physical NICs deliver them complete;
# a veth from another netns does not: `ethtool -K IFACE tx off` on its peer).
set -eu

BRIDGE=${1:-br0}
UPLINK=${2:-$(ip -o route show default 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p' | head -1)}
DATAPATH=${DATAPATH:-auto}
OVSDB=unix:${OVS_RUNDIR:-/var/run/openvswitch}/db.sock
if [ -z "${OVS_PORTMAP:-}" ]; then
	for p in /opt/cni/bin/ovs-portmap "$(command -v ovs-portmap || true)" /opt/ovsflow/bin/ovs-portmap; do
		[ -n "$p" ] && [ -x "$p" ] && { OVS_PORTMAP=$p; break; }
	done
fi

log() { echo "node-prep: $*"; }
die() { echo "node-prep: $*" >&2; exit 1; }

[ -n "$UPLINK" ] || die "no uplink given and no default route to find it by"
[ "$UPLINK" != "$BRIDGE" ] || die "the uplink $UPLINK is the bridge (already prepared? give the uplink by name)"
ip link show "$UPLINK" >/dev/null 2>&1 || die "uplink $UPLINK: no such interface"
ovs-vsctl --timeout=10 show >/dev/null || die "Open vSwitch does not answer (ovs-vsctl show)"
[ -n "${OVS_PORTMAP:-}" ] && [ -x "$OVS_PORTMAP" ] ||
	die "no ovs-portmap (OVS_PORTMAP=PATH; the DaemonSet image has it in /opt/ovsflow/bin): it installs the secure bridge's base flow"
if [ "$DATAPATH" = auto ]; then
	if [ -d /sys/module/openvswitch ]; then DATAPATH=system; else DATAPATH=netdev; fi
fi
case $DATAPATH in system | netdev) ;; *) die "DATAPATH=$DATAPATH: want system, netdev or auto" ;; esac

sysctl_set() { # KEY VALUE: writes it unless it has that value
	f=/proc/sys/$(echo "$1" | tr . /)
	[ "$(cat "$f")" = "$2" ] || { echo "$2" >"$f"; log "$1=$2"; }
}

# 1. The bridge, secure and ours, its base flow, then the uplink port.
ovs-vsctl --timeout=10 --may-exist add-br "$BRIDGE" -- set Bridge "$BRIDGE" datapath_type="$DATAPATH" \
	fail_mode=secure external_ids:ovsflow.io/owner=ovsflow-cni
if [ "$DATAPATH" = netdev ]; then
	# A MAC of the bridge's own, derived from the uplink's (stable across
	# boots, so that neighbours' caches stay right): OVS would otherwise give
	# the bridge the uplink's MAC, and the kernel would take the frames meant
	# for the bridge on the uplink too.
	mac=$(cat "/sys/class/net/$UPLINK/address")
	first=$(printf '%02x' $((0x${mac%%:*} ^ 0x04 | 0x02)))
	own="$first:${mac#*:}"
	cur=$(ovs-vsctl --timeout=10 get Bridge "$BRIDGE" other_config:hwaddr 2>/dev/null | tr -d '"' || true)
	[ "$cur" = "$own" ] || { ovs-vsctl --timeout=10 set Bridge "$BRIDGE" other_config:hwaddr="$own"; log "$BRIDGE hwaddr $own"; }
fi
for _ in $(seq 50); do ip link show "$BRIDGE" >/dev/null 2>&1 && break; sleep 0.1; done
ip link show "$BRIDGE" >/dev/null 2>&1 || die "ovs-vswitchd did not create $BRIDGE's internal interface"
# reconcile fails while ovs-vswitchd has not opened the bridge's OpenFlow socket yet.
for i in $(seq 50); do
	if out=$("$OVS_PORTMAP" reconcile -ovsdb "$OVSDB" 2>&1); then
		log "$(echo "$out" | tail -1 | sed 's/^[^ ]* //')"
		break
	fi
	[ "$i" -lt 50 ] || die "ovs-portmap reconcile: $out"
	sleep 0.1
done
ovs-vsctl --timeout=10 --may-exist add-port "$BRIDGE" "$UPLINK"

# 2. The node's addresses and routes, from the uplink to the bridge. Routes
# first (deleting the addresses takes them away); the connected routes
# ("proto kernel") come back with the addresses.
routes4=$(ip -o -4 route show dev "$UPLINK" | grep -v ' proto kernel' || true)
routes6=$(ip -o -6 route show dev "$UPLINK" | grep -v ' proto kernel' | sed 's/ expires [0-9a-z]*//; s/ proto ra//' || true)
if [ -n "$(ip -o -6 addr show dev "$UPLINK" scope global)" ]; then
	sysctl_set "net.ipv6.conf.$BRIDGE.disable_ipv6" 0 # a new interface may inherit IPv6 off
fi
for fam in 4 6; do
	ip -o -"$fam" addr show dev "$UPLINK" scope global | while read -r _ _ _ addr _; do
		if [ "$fam" = 6 ]; then
			ip -6 addr replace "$addr" dev "$BRIDGE" nodad
		else
			ip -4 addr replace "$addr" dev "$BRIDGE"
		fi
		ip -"$fam" addr del "$addr" dev "$UPLINK"
		log "$addr moved from $UPLINK to $BRIDGE"
	done
done
ip link set "$BRIDGE" up
for fam in 4 6; do
	if [ "$fam" = 4 ]; then rs=$routes4; else rs=$routes6; fi
	echo "$rs" | while read -r r; do
		[ -n "$r" ] || continue
		# shellcheck disable=SC2086
		ip -"$fam" route replace $r dev "$BRIDGE" && log "route $r dev $BRIDGE"
	done
done

# 3. The uplink off the node's IP stack (userspace datapath only), and no TX
# checksum offload on the bridge's interface: the userspace datapath's
# conntrack (host ports) drops packets whose checksum the kernel left to
# the device.
if [ "$DATAPATH" = netdev ]; then
	if command -v ethtool >/dev/null; then
		ethtool -K "$BRIDGE" tx off >/dev/null 2>&1 || log "ethtool -K $BRIDGE tx off failed"
	else
		log "no ethtool: TX checksum offload left on $BRIDGE"
	fi
	sysctl_set "net.ipv4.conf.$UPLINK.arp_ignore" 8
	[ -e "/proc/sys/net/ipv6/conf/$UPLINK" ] && sysctl_set "net.ipv6.conf.$UPLINK.disable_ipv6" 1
fi

# 4. Forwarding, for the pods' traffic to and from other nodes, without ICMP
# redirects: the bridge's interface is both the pods' gateway and the way to
# the other nodes, so the kernel would tell a pod to send to another node
# directly (the next hop is "on the same link"). The pod's packets would then
# bypass this node while the answers come back through it: its conntrack
# sees a TCP answer without the SYN, INVALID, which kube-proxy's KUBE-FORWARD
# chain drops. The effective value is "all" OR the interface's, so both go
# off. IPv6 has no such sysctl: the suite's base flows, which the reconcile
# above installs, drop the node's ICMPv6 redirects into the bridge
# (flows.PriorityNodeRedirect).
sysctl_set net.ipv4.ip_forward 1
[ -e /proc/sys/net/ipv6/conf/all/forwarding ] && sysctl_set net.ipv6.conf.all.forwarding 1
sysctl_set net.ipv4.conf.all.send_redirects 0
sysctl_set "net.ipv4.conf.$BRIDGE.send_redirects" 0
log "$BRIDGE ($DATAPATH) ready with uplink $UPLINK"
