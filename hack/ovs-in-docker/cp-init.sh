#!/bin/bash
# cp-init.sh: PID 1 of the control-plane container of `hack/ovs-in-docker.sh up
# -kube`: etcd (its data in the container), kube-apiserver on the container's
# address, kube-controller-manager (node IPAM: each Node gets a pod CIDR of
# each family) and kube-scheduler, with the command lines the harness's tool
# wrote into $OID_KUBE/control-plane.sh (test/cluster/harness/kubeconf) and
# the binaries of its cached build (mounted read-only at
# /opt/ovsflow-kube/bin), and the routes to every Node's pod ranges
# (`ovsflow-agent routes`: this container is no Node, and kube-apiserver dials
# pods for its proxy, admission webhooks and aggregated APIs). Each is
# restarted when it exits. Logs in /var/log/oid/.
#
# Environment (hack/ovs-in-docker.sh sets it): OID_KUBE (the PKI, configs and
# command lines, mounted read-only at that path); for the log: OID_CP4 (the
# address kube-apiserver advertises), OID_CLUSTER_CIDRS, OID_SERVICE_CIDRS.
set -euo pipefail
mkdir -p /run/oid /var/log/oid /var/lib/etcd
log() { echo "cp-init: $(date +%T.%N | cut -c1-12) $*"; }
exec > >(tee -a /var/log/oid/cp-init.log) 2>&1
pki=$OID_KUBE/pki

# supervise NAME CMD...: CMD in the background, started again a second after it exits.
supervise() {
	local name=$1
	shift
	(
		while :; do
			"$@" >>"/var/log/oid/$name.log" 2>&1 </dev/null || true
			echo "cp-init: $name exited, starting it again" >>"/var/log/oid/$name.log"
			sleep 1
		done
	) &
}

# The nodes' userspace conntrack drops packets whose checksum was left to
# offload (a veth's default): the control plane's go out complete (on both
# subnets' networks, with two).
for i in /sys/class/net/eth*; do ethtool -K "${i##*/}" tx off >/dev/null; done
log "control plane: API server on $OID_CP4, pods $OID_CLUSTER_CIDRS, services $OID_SERVICE_CIDRS"
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler: supervise NAME CMD... each.
# shellcheck source=/dev/null
. "$OID_KUBE/control-plane.sh"
supervise ovsflow-agent /opt/ovsflow/bin/ovsflow-agent routes -kubeconfig "$pki/admin.kubeconfig"
touch /run/oid/ready
log "started"
trap 'exit 0' TERM INT
sleep infinity &
wait $!
