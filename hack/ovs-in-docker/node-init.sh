#!/bin/bash
# node-init.sh: PID 1 of an ovs-in-docker node (hack/ovs-in-docker.sh), run on
# every start of the container, as a node boots:
#   1. ovsdb-server (as the openvswitch user: db.sock is that user's) and
#      ovs-vswitchd (root), from the database kept in the container;
#   2. deploy/node-prep.sh: br0 (fail_mode=secure, its base flow installed
#      by the image's ovs-portmap reconcile) with the uplink eth0, addresses
#      moved, uplink isolation (netdev), forwarding; then routes to the other
#      nodes' pod CIDRs ($OID_ROUTES: "CIDR via ADDR" separated by commas),
#      and, on two subnets, to the other subnet and the control plane
#      ($OID_UNDERLAY_ROUTES, the same form; with or without Kubernetes);
#   3. containerd with its CRI plugin, the pause and app images imported;
#   4. install-cni.sh as the DaemonSet's init container runs it (its env,
#      /host/... paths), with this node's $OVSFLOW_POD_CIDRS;
#   5. `ovs-portmap reconcile -watch` as the DaemonSet's reconcile container
#      runs it: root with no capability but those the manifest grants, no
#      new privileges, /proc/sys and / read-only (oid-reconcile);
# then /run/oid/ready. Logs in /var/log/oid/.
#
# A node of a Kubernetes cluster (`up -kube`, $OID_KUBE set) does 1 and 2
# without pod routes (cross-node pod routes are the node agent's), then runs
# containerd 2.x (or CRI-O, when the harness wrote crio.conf for the node),
# kubelet and kube-proxy of the harness's cached build (kubebuild)
# (mounted read-only at /opt/ovsflow-kube/bin) with the configs the harness
# wrote under $OID_KUBE/$(hostname); the plugins, the conflist and reconcile
# are then the DaemonSet's (`hack/ovs-in-docker.sh deploy`), not this
# script's. Each daemon is started again when it exits.
#
#   node-init.sh             boot (the entrypoint)
#   node-init.sh ovs-restart kill ovs-vswitchd and ovsdb-server and start them again
set -euo pipefail
# The node's mounts are shared, as a host's are under systemd (and as kind
# makes its nodes'): the DaemonSet mounts /var/run/netns with HostToContainer
# propagation, which needs a shared or slave source.
mount --make-rshared /
mkdir -p /run/oid /var/log/oid /run/openvswitch /var/log/openvswitch
log() { echo "node-init: $(date +%T.%N | cut -c1-12) $*"; }

start_ovs() {
	[ -f /etc/openvswitch/conf.db ] || ovsdb-tool create /etc/openvswitch/conf.db /usr/share/openvswitch/vswitch.ovsschema
	mkdir -p /var/lib/openvswitch
	chown -R openvswitch:openvswitch /etc/openvswitch /var/lib/openvswitch /run/openvswitch /var/log/openvswitch
	ovsdb-server /etc/openvswitch/conf.db --remote=punix:/run/openvswitch/db.sock \
		--pidfile=/run/openvswitch/ovsdb-server.pid --detach --log-file=/var/log/openvswitch/ovsdb-server.log \
		--user=openvswitch:openvswitch -vconsole:warn
	ovs-vsctl --no-wait init
	ovs-vsctl --no-wait set Open_vSwitch . external_ids:hostname="$(hostname)"
	ovs-vswitchd --pidfile=/run/openvswitch/ovs-vswitchd.pid --detach --log-file=/var/log/openvswitch/ovs-vswitchd.log -vconsole:warn
	ovs-vsctl --timeout=10 show >/dev/null
	log "Open vSwitch up"
}

stop_ovs() {
	for d in ovs-vswitchd ovsdb-server; do
		[ -f "/run/openvswitch/$d.pid" ] || continue
		pid=$(cat "/run/openvswitch/$d.pid")
		kill -9 "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
		rm -f "/run/openvswitch/$d.pid"
	done
	log "Open vSwitch stopped"
}

if [ "${1:-}" = ovs-restart ]; then
	stop_ovs
	start_ovs
	exit 0
fi

exec > >(tee -a /var/log/oid/node-init.log) 2>&1
log "boot of $(hostname): pod CIDRs ${OVSFLOW_POD_CIDRS:-those of its Node object}, datapath ${DATAPATH:-auto}"
rm -f /run/oid/ready
start_ovs
OVS_PORTMAP=/opt/ovsflow/bin/ovs-portmap /usr/local/sbin/node-prep.sh br0 eth0
IFS=, read -ra routes <<<"${OID_UNDERLAY_ROUTES:+$OID_UNDERLAY_ROUTES,}${OID_ROUTES:-}"
for r in "${routes[@]}"; do
	[ -n "$r" ] || continue
	fam=-4
	[[ $r == *:* ]] && fam=-6
	# shellcheck disable=SC2086
	ip $fam route replace $r dev br0
	log "route $r"
done
# The node as node-prep.sh and the harness's routes left it on its first
# boot (oid-snapshot).
if [ ! -f /etc/oid/prepared ]; then
	mkdir -p /etc/oid
	oid-snapshot br0 >/etc/oid/prepared.new && mv /etc/oid/prepared.new /etc/oid/prepared
fi

# supervise NAME CMD...: CMD in the background, started again a second after it exits.
supervise() {
	local name=$1
	shift
	(
		while :; do
			"$@" >>"/var/log/oid/$name.log" 2>&1 </dev/null || true
			echo "node-init: $name exited, starting it again" >>"/var/log/oid/$name.log"
			sleep 1
		done
	) &
}

# kube_node: the rest of the boot of a Kubernetes node; does not return.
kube_node() {
	local bin=/opt/ovsflow-kube/bin me
	me=$(hostname)
	export PATH=$bin:$PATH # containerd's runc shim
	# kubelet's cgroupRoot, in every hierarchy (a new cpuset needs CPUs and memory nodes).
	# It is outside this container's cgroup, so a restart of the container
	# leaves the cgroups of the pods it ran, which a reboot would not: they
	# are removed, deepest first (their processes died with the container);
	# kubelet's cAdvisor otherwise retries each for half a minute before
	# kubelet registers the Node.
	local cg=${OID_CGROUP#/}/$me h d
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h$cg" ] && find "$h$cg" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
		mkdir -p "$h$cg"
	done
	if [ -d /sys/fs/cgroup/cpuset ]; then
		for d in "${OID_CGROUP#/}" "$cg"; do
			cat "/sys/fs/cgroup/cpuset/$(dirname "$d")/cpuset.cpus" >"/sys/fs/cgroup/cpuset/$d/cpuset.cpus"
			cat "/sys/fs/cgroup/cpuset/$(dirname "$d")/cpuset.mems" >"/sys/fs/cgroup/cpuset/$d/cpuset.mems"
		done
	fi
	# The runtime: CRI-O when the harness wrote its config for this node
	# (up -kube -runtime crio), else containerd; crictl and oid-image follow it.
	local runtime=containerd t ver
	[ -f "$OID_KUBE/$me/crio.conf" ] && runtime=crio
	echo "$runtime" >/run/oid/runtime
	if [ "$runtime" = crio ]; then
		printf 'runtime-endpoint: unix:///var/run/crio/crio.sock\nimage-endpoint: unix:///var/run/crio/crio.sock\ntimeout: 60\n' >/etc/crictl.yaml
		for t in /opt/oid/images/*.tar; do
			# shellcheck disable=SC2046 # NAME ID
			oid-image import "$t" $(cat "$t.ref")
		done
		supervise crio /usr/local/bin/crio --config "$OID_KUBE/$me/crio.conf" --log-level info
		ver=$(/usr/local/bin/crio --version | sed -n 's/^crio version //p')
	else
		supervise containerd "$bin/containerd" --config "$OID_KUBE/$me/containerd.toml"
		ver=$("$bin/containerd" --version | cut -d' ' -f3)
	fi
	for _ in $(seq 150); do crictl info >/dev/null 2>&1 && break; sleep 0.2; done
	crictl info >/dev/null || { log "$runtime did not come up"; exit 1; }
	if [ "$runtime" = containerd ]; then
		for t in /opt/oid/images/*.tar; do oid-image import "$t" $(cat "$t.ref"); done
	fi
	log "$runtime $ver up, images imported"
	supervise kubelet "$bin/kubelet" --config "$OID_KUBE/$me/kubelet.yaml" \
		--kubeconfig "$OID_KUBE/pki/kubelet-$me.kubeconfig" --hostname-override "$me" --node-ip "$OID_NODE_IPS"
	supervise kube-proxy "$bin/kube-proxy" --config "$OID_KUBE/$me/proxy.yaml"
	touch /run/oid/ready
	log "kubelet and kube-proxy started"
	trap 'exit 0' TERM INT
	sleep infinity &
	wait $!
}
[ -z "${OID_KUBE:-}" ] || kube_node

containerd >>/var/log/oid/containerd.log 2>&1 &
for _ in $(seq 150); do crictl info >/dev/null 2>&1 && break; sleep 0.2; done
crictl info >/dev/null || { log "containerd did not come up"; exit 1; }
for t in /opt/oid/images/*.tar; do ctr -n k8s.io images import --no-unpack "$t" >/dev/null; done
log "containerd up, images imported"

# The DaemonSet's init container: its environment (deploy/ovsflow-cni.yaml)
# and mounts (/host/opt/cni/bin, /host/etc/cni/net.d are the node's dirs).
env SRC_BIN_DIR=/opt/ovsflow/bin CNI_BIN_DIR=/host/opt/cni/bin CNI_CONF_DIR=/host/etc/cni/net.d \
	CNI_CONF_SRC=/etc/ovsflow/10-ovsflow.conflist PLUGINS="ovs-bridge ovs-bridge-tls ovs-portmap ovs-bandwidth" \
	OPTIONAL_PLUGINS="host-local loopback" OVSFLOW_POD_CIDRS="$OVSFLOW_POD_CIDRS" /install-cni.sh

/usr/local/sbin/oid-reconcile >>/var/log/oid/reconcile.log 2>&1 &
touch /run/oid/ready
log "ready"
trap 'exit 0' TERM INT
sleep infinity &
wait $!
