#!/usr/bin/env bash
# ovs-sandbox.sh: a private Open vSwitch for tests and demos.
#
#   hack/ovs-sandbox.sh start [NAME]   start ovsdb-server + ovs-vswitchd (userspace
#                                      "netdev" datapath) inside network namespace NAME,
#                                      with a private run directory and database;
#                                      prints shell assignments: OVSDB= NETNS= RUNDIR=
#                                      (refuses a netns NAME that it did not create)
#   hack/ovs-sandbox.sh stop [NAME]    stop both daemons, delete the netns (if it created it) and the run dir
#   hack/ovs-sandbox.sh stop-vswitchd|start-vswitchd [NAME]   (fault injection in tests)
#   hack/ovs-sandbox.sh stop-ovsdb|start-ovsdb [NAME]         (the same, for ovsdb-server)
#   hack/ovs-sandbox.sh install        install the packages the sandbox needs
#
# It never touches a host Open vSwitch: every file lives under /run/ovsflow/NAME and
# both daemons run inside the netns, so several sandboxes can share one machine.
set -euo pipefail

cmd=${1:-}
name=${2:-ovsflow-sb}
[[ $name =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || { echo "ovs-sandbox: bad name \"$name\"" >&2; exit 2; }
rundir=/run/ovsflow/$name

log() { echo "ovs-sandbox: $*" >&2; }
# shellcheck source=hack/lib/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

need=(ovsdb-server ovs-vswitchd ovs-vsctl ovs-ofctl ovsdb-tool ip ethtool nft conntrack dnsmasq)
install() {
	local missing=0
	for b in "${need[@]}"; do command -v "$b" >/dev/null 2>&1 || missing=1; done
	[ -x /usr/sbin/ovs-vswitchd ] || missing=1
	((missing)) || return 0
	apt_install openvswitch-switch openvswitch-common iproute2 ethtool nftables conntrack \
		iputils-ping dnsmasq-base
	# The package's init script may start a host OVS; the sandbox never uses it.
}

ovsenv() {
	export OVS_RUNDIR=$rundir OVS_DBDIR=$rundir OVS_LOGDIR=$rundir OVS_SYSCONFDIR=$rundir
	PATH=$PATH:/usr/sbin:/usr/share/openvswitch/scripts
}

# start_ovsdb serves the sandbox's database (kept in $rundir across a
# stop-ovsdb).
start_ovsdb() {
	ovsenv
	ip netns exec "$name" ovsdb-server "$rundir/conf.db" --remote="punix:$rundir/db.sock" \
		--private-key=db:Open_vSwitch,SSL,private_key --certificate=db:Open_vSwitch,SSL,certificate \
		--ca-cert=db:Open_vSwitch,SSL,ca_cert \
		--unixctl="$rundir/ovsdb-server.ctl" \
		--pidfile="$rundir/ovsdb-server.pid" --detach --no-chdir \
		--log-file="$rundir/ovsdb-server.log" -vconsole:off
}

start_vswitchd() {
	ovsenv
	ip netns exec "$name" ovs-vswitchd "unix:$rundir/db.sock" --pidfile="$rundir/ovs-vswitchd.pid" \
		--detach --no-chdir --log-file="$rundir/ovs-vswitchd.log" -vconsole:off -vfile:info
}

stop_pidfile() {
	local pf=$1 pid
	[ -f "$pf" ] || return 0
	pid=$(cat "$pf" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pf"
}

case $cmd in
install) install ;;
start)
	install
	ovsenv
	if [ -e "/run/netns/$name" ]; then
		# Only a namespace this script made (marked in its run dir) is
		# replaced: another one holds someone else's interfaces.
		if [ ! -e "$rundir/netns-created" ]; then
			log "network namespace \"$name\" exists and was not created by ovs-sandbox.sh: pick another NAME, or delete it (ip netns del $name)"
			exit 1
		fi
		"$0" stop "$name"
	fi
	mkdir -p "$rundir"
	ip netns add "$name"
	touch "$rundir/netns-created"
	ip -n "$name" link set lo up
	ovsdb-tool create "$rundir/conf.db" /usr/share/openvswitch/vswitch.ovsschema
	# The SSL options name the database's SSL row, as ovs-ctl does: empty
	# until a test sets it (ovs-vsctl set-ssl) and adds a pssl: remote
	# (ovs-appctl ovsdb-server/add-remote) on the namespace's loopback.
	start_ovsdb
	ovs-vsctl --db="unix:$rundir/db.sock" --no-wait init
	start_vswitchd
	echo "OVSDB=unix:$rundir/db.sock"
	echo "NETNS=$name"
	echo "RUNDIR=$rundir"
	;;
stop)
	ovsenv
	stop_pidfile "$rundir/ovs-vswitchd.pid"
	stop_pidfile "$rundir/ovsdb-server.pid"
	if [ -e "/run/netns/$name" ] && [ -e "$rundir/netns-created" ]; then
		# Netdev bridges leave kernel taps behind in the namespace; deleting it removes them.
		ip netns del "$name" || true
	fi
	rm -rf "$rundir"
	;;
stop-vswitchd) stop_pidfile "$rundir/ovs-vswitchd.pid" ;;
start-vswitchd) start_vswitchd ;;
stop-ovsdb) stop_pidfile "$rundir/ovsdb-server.pid" ;;
start-ovsdb) start_ovsdb ;;
*)
	sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
