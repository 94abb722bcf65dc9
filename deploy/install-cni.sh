#!/bin/sh
# install-cni.sh: puts the ovsflow CNI plugins and their conflist into the
# node's CNI directories, the way flannel's and multus's installers do, on a
# node without the agent (in Kubernetes, ovsflow-agent does this: see
# docs/kubernetes.md; hack/ovs-in-docker's nodes run this script).
# Idempotent: a file whose content is already in place is not touched, and
# every write is a copy to a temporary name in the target directory followed
# by a rename, so a runtime never executes or reads a half-written file (and
# replacing a plugin that is running is safe).
#
#   install-cni.sh            install once, then exit
#   install-cni.sh --watch    install, then again every WATCH_INTERVAL seconds, so that
#                             a changed template or a wiped node directory is
#                             repaired; exits on SIGTERM
#
# Environment (defaults are the agent's paths in the DaemonSet):
#   SRC_BIN_DIR       plugins in the image             /opt/ovsflow/bin
#   CNI_BIN_DIR       the node's CNI bin dir, mounted  /host/opt/cni/bin
#   CNI_CONF_DIR      the node's CNI conf dir, mounted /host/etc/cni/net.d
#   CNI_CONF_SRC      the conflist template (ConfigMap key) /etc/ovsflow/10-ovsflow.conflist
#   PLUGINS           always installed                 "ovs-bridge ovs-bridge-tls ovs-portmap"
#   OPTIONAL_PLUGINS  installed only where the node has none of that name: "host-local loopback"
#   WATCH_INTERVAL    seconds between two passes of --watch: 30
#
# The node's pod ranges: the conflist installed is CNI_CONF_SRC with every
# host-local range replaced by one range per pod CIDR of this node, gateway
# its first address (ovsflow-conflist, in SRC_BIN_DIR). The CIDRs come from
#   OVSFLOW_POD_CIDRS       comma-separated IPv4 and/or IPv6 CIDRs, else
#   OVSFLOW_POD_CIDRS_FILE  a file holding the same.
set -eu

SRC_BIN_DIR=${SRC_BIN_DIR:-/opt/ovsflow/bin}
CNI_BIN_DIR=${CNI_BIN_DIR:-/host/opt/cni/bin}
CNI_CONF_DIR=${CNI_CONF_DIR:-/host/etc/cni/net.d}
CNI_CONF_SRC=${CNI_CONF_SRC:-/etc/ovsflow/10-ovsflow.conflist}
PLUGINS=${PLUGINS:-ovs-bridge ovs-bridge-tls ovs-portmap}
WATCH_INTERVAL=${WATCH_INTERVAL:-30}
OPTIONAL_PLUGINS=${OPTIONAL_PLUGINS-host-local loopback}

log() { echo "install-cni: $*"; }

# install_file SRC DST MODE: copies SRC over DST unless DST has the same content.
install_file() {
	if [ -f "$2" ] && cmp -s "$1" "$2"; then
		return 0
	fi
	tmp="$(dirname "$2")/.$(basename "$2").install-cni.$$"
	cp "$1" "$tmp"
	chmod "$3" "$tmp"
	mv -f "$tmp" "$2"
	log "installed $2"
}

# pod_cidrs prints this node's pod CIDRs, comma-separated.
pod_cidrs() {
	if [ -n "${OVSFLOW_POD_CIDRS:-}" ]; then
		echo "$OVSFLOW_POD_CIDRS"
	elif [ -n "${OVSFLOW_POD_CIDRS_FILE:-}" ]; then
		[ -r "$OVSFLOW_POD_CIDRS_FILE" ] || { log "OVSFLOW_POD_CIDRS_FILE=$OVSFLOW_POD_CIDRS_FILE: cannot read it" >&2; return 1; }
		tr -s ' \t\n' ',,,' <"$OVSFLOW_POD_CIDRS_FILE"
	else
		log "no pod CIDRs: set OVSFLOW_POD_CIDRS or OVSFLOW_POD_CIDRS_FILE (in Kubernetes, ovsflow-agent reads the Node's spec.podCIDRs)" >&2
		return 1
	fi
}

# render_conflist writes the node's conflist (CNI_CONF_SRC with its pod ranges) to $1.
render_conflist() {
	cidrs=$(pod_cidrs) || return 1
	"$SRC_BIN_DIR/ovsflow-conflist" -pod-cidrs "$cidrs" <"$CNI_CONF_SRC" >"$1" || {
		log "rendering $CNI_CONF_SRC for pod CIDRs $cidrs failed" >&2
		return 1
	}
}

sync_once() {
	mkdir -p "$CNI_BIN_DIR" "$CNI_CONF_DIR"
	for p in $PLUGINS; do
		install_file "$SRC_BIN_DIR/$p" "$CNI_BIN_DIR/$p" 0755
	done
	for p in $OPTIONAL_PLUGINS; do
		[ -e "$CNI_BIN_DIR/$p" ] || install_file "$SRC_BIN_DIR/$p" "$CNI_BIN_DIR/$p" 0755
	done
	# The conflist last: the runtime sees the network only once its plugins are there.
	rendered="$CNI_CONF_DIR/.$(basename "$CNI_CONF_SRC").rendered.$$"
	if ! render_conflist "$rendered"; then
		rm -f "$rendered"
		return 1
	fi
	install_file "$rendered" "$CNI_CONF_DIR/$(basename "$CNI_CONF_SRC")" 0644
	rm -f "$rendered"
}

case ${1:-} in
"") sync_once ;;
--watch)
	trap 'exit 0' TERM INT
	while :; do
		sync_once
		sleep "$WATCH_INTERVAL" &
		wait $! || true
	done
	;;
*)
	sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
