#!/usr/bin/env bash
# ovs-in-docker.sh: a multi-node harness. Each node is a Docker container
# running Open vSwitch (ovsdb-server + ovs-vswitchd), containerd with its CRI
# plugin and crictl, and the plugins (deploy/install-cni.sh with the node's
# own pod ranges, and `ovs-portmap reconcile -watch`, what the DaemonSet's
# agent does in-process). The nodes share one Docker network; each node's
# uplink is its container interface, a port of br0 (deploy/node-prep.sh);
# without -kube the harness routes the other nodes' pod CIDRs, with -kube
# the DaemonSet's agent does. The harness's engine, images and nodes are the
# Go tool test/cluster/cmd/ovs-in-docker (this script builds it, cached), and
# so are up -kube, deploy, image, test, bench, build and conformance; the
# demos are the shell of hack/ovs-in-docker/ (the commands as typed).
#
#   hack/ovs-in-docker.sh up [-nodes N]   start N nodes (default 2, at most 4); one line per node:
#                                           NODE <name> <node IPv4> <node IPv6> <pod IPv4 CIDR> <pod IPv6 CIDR>
#   hack/ovs-in-docker.sh exec NODE CMD...  run CMD in a node (stdin passed through, its exit status)
#   hack/ovs-in-docker.sh restart NODE    docker restart of a node, until it has booted again
#   hack/ovs-in-docker.sh pid NAME        the host's process ID of a container's first process (a node, cp, router)
#   hack/ovs-in-docker.sh test [-nodes N] up (default 3 nodes), the Go tests of test/multinode, "N passed, M failed", down
#   hack/ovs-in-docker.sh demo            up, a host port pod on each node reached across nodes and from here, down
#   hack/ovs-in-docker.sh down [-images]  remove the nodes, network, volumes (with -images: the images, and the
#                                         base's root tar every prefix imports, /var/cache/ovsflow-oid);
#                                         stops the private dockerd if this script started it. Idempotent.
#
# A Kubernetes cluster (the binaries of the tool's cached build, test/cluster/harness/kubebuild):
#   hack/ovs-in-docker.sh up -kube [-multus] [-nodes N] [-runtime containerd|crio] [-subnets 2]  a control-plane container (cp) and
#                                         N nodes (default 3, at most 4) running containerd 2.x (-runtime crio: CRI-O,
#                                         of hack/install-runtimes.sh), kubelet, kube-proxy; one line per node:
#                                           NODE <name> <node IPv4> <node IPv6> <pod CIDRs from its Node object>
#                                         and KUBECONFIG=<the admin's kubeconfig>; -multus: deploy puts Multus
#                                         (thin plugin, of the cached build) in front of ovsflow;
#                                         -subnets 2: the even nodes on a second Docker network (OID_NET4B, OID_NET6B)
#                                         behind a router container, the control plane on both: across the two, pods
#                                         reach each other through the node agent's tunnel (test/cluster/harness/topology)
#   hack/ovs-in-docker.sh kubectl ARGS...  kubectl against the cluster
#   hack/ovs-in-docker.sh deploy          the DaemonSet's image (this tree) into every node, deploy/ovsflow-cni.yaml applied (server-side),
#                                         then the cluster DNS (CoreDNS, deploy/coredns.yaml) until Ready
#                                         (after up -kube -multus: then deploy/multus.yaml and Multus on every node)
#   hack/ovs-in-docker.sh image TAG       another image of this tree, tagged and stamped TAG, into every node
#                                         (for an upgrade: kubectl set image); prints IMAGE=<name>
#   hack/ovs-in-docker.sh stats [SECONDS] CPU and memory of each container and of each node's pods
#   hack/ovs-in-docker.sh test -kube [-nodes N] [-runtime crio] [-subnets 2] [-conformance]  up -kube, deploy, (-conformance:
#                                         conformance's default selection first, on the fresh cluster), the Go tests of
#                                         test/cluster; then Multus in front and its tests (containerd only); down
#   hack/ovs-in-docker.sh demo -kube [-nodes N]  up -kube, deploy, hostPort pods on every node reached across nodes and from here, down
#   hack/ovs-in-docker.sh bench -kube [-nodes N] [-pods P] [-idle S] [-record DIR]  a benchmark (the tool's bench):
#                                         up -kube (default 3 nodes), deploy; for ovsflow, then the reference chain
#                                         (containernetworking/plugins bridge + host-local + portmap) in its place:
#                                         P pods per node (default 110) of one hostPort each scaled up until all are
#                                         Ready and down until all are gone, the node agent's RSS and CPU (idle S s,
#                                         default 30, with no pods and with all); the tables; down. IPv6-only pods.
#   hack/ovs-in-docker.sh bench -overlay [-record DIR] [-parts paths,peers] [-peers N] [-window D]  the overlay's
#                                         benchmark (test/cluster/overlaybench): up -kube -nodes 3 -subnets 2, deploy, from
#                                         one pod TCP throughput and RTT to a pod of its subnet (host-gw) and of the other
#                                         (the tunnel), both families, as ratios (paths); the node agent's CPU and RSS with
#                                         the cluster's Nodes and with simulated ones up to N (default 50) (peers); down
#   hack/ovs-in-docker.sh build           what up -kube, deploy (with Multus) and conformance run, into the cache, each
#                                         unless there: Kubernetes, etcd, containerd, CoreDNS, Multus, e2e.test, agnhost,
#                                         ginkgo and the conformance images (kubebuild); they wait for a build under way
#   hack/ovs-in-docker.sh conformance [-selection default|network] [-focus RE] [-skip RE] [-chain ovsflow|reference]
#                                         [-procs P] [-nodes N] [-build]  Kubernetes' own e2e suite (e2e.test,
#                                         the tool's conformance): builds it and its images, up -kube and deploy
#                                         when no cluster is up (default 3 nodes; left up), the tests matching -focus and not
#                                         -skip (default: the selection's; default: HostPort, Networking Granular Checks: Pods,
#                                         Conntrack, one DNS test; network: [sig-network] [Conformance], HostPort, Granular
#                                         Checks, Conntrack, NoSNAT, dual stack, Services), on the chain asked (reference:
#                                         bridge + host-local + portmap in ovsflow's place), in P Ginkgo processes (default 1);
#                                         one line: CONFORMANCE chain=C passed=P failed=F skipped=S took=T junit=FILE log=FILE;
#                                         -build: only build e2e.test, agnhost, ginkgo and the images (cached)
#
# The engine: the one answering at $DOCKER_HOST or /var/run/docker.sock; else
# (root on Debian) Debian's docker.io is installed and a private dockerd is
# started (own data root, exec root, socket, pid file; --iptables=false
# --ip6tables=false --bridge=none --ip-forward=false: the host's firewall and
# sysctls are left alone; with -kube, the kernel-wide sysctls kubelet sets are
# recorded before the first node and put back by down). Everything made here is named $OID_PREFIX-* and
# labelled ovsflow.io/harness=$OID_PREFIX; nothing else is touched.
#
# Environment: OID_PREFIX (ovsflow-oid), OID_NET4 (203.0.113.160/27), OID_NET6
# (2001:db8:10::/64), OID_POD4 (198.51.100.0/24, a /26 per node), OID_POD6
# (2001:db8:10:N::/64 per node), VERSION (stamped into the plugins); with -kube:
# OID_KPOD4 (the cluster CIDR, default OID_POD4), OID_KPOD6 (2001:db8:10:100::/56),
# OID_KPOD4=none: IPv6-only pods; OID_SVC4 (203.0.113.192/27), OID_SVC6 (2001:db8:10:ffff::/112),
# OID_KMASK4 (26: the IPv4 range per node), OID_KMAXPODS (kubelet's maxPods; default kubelet's, 110).
# OID_DNS (1: CoreDNS of deploy/coredns.yaml, kubelet's clusterDNS its kube-dns Service; 0: no cluster DNS).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
export DEBIAN_FRONTEND=noninteractive

P=${OID_PREFIX:-ovsflow-oid}
LABEL=ovsflow.io/harness=$P

log() { echo "ovs-in-docker: $*" >&2; }
die() { log "$*"; exit 1; }

# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh # (the script runs from the repository root)

# ---- the harness's Go tool ---------------------------------------------------
# test/cluster/cmd/ovs-in-docker: the engine, the images, the nodes (up, down,
# exec, restart and test without -kube are its own; the Kubernetes cluster's
# steps below call it for what they share), hack/lib/oid.sh.
# shellcheck source=hack/lib/oid.sh
. hack/lib/oid.sh
oid_build "$P" || exit 1
plan=$(oid plan) || exit 2 # NET4, NET6, POD4 (checked), DATA
eval "$plan"

# engine makes `docker` talk to the engine that answers (ours started when $1 is "start").
engine() {
	local h
	if [ "${1:-}" = start ]; then h=$(oid engine -start) || exit 1; else h=$(oid engine 2>/dev/null) || return 1; fi
	export DOCKER_HOST=$h
}

# The plan's addresses (test/cluster/harness/topology): NODE's, the networks'.
node4() { oid addr node4 "$1"; }
node6() { oid addr node6 "$1"; }
nodes() { oid nodes; }
version() { oid version; }

# cmd_up ARGS: the tool's up (with -kube too); -subnets is kept for the
# commands run after it (the plan reads OID_SUBNETS), and docker talks to
# the engine up started.
cmd_up() {
	local a prev=
	for a; do
		[ "$prev" != -subnets ] || export OID_SUBNETS=$a
		prev=$a
	done
	oid up "$@" && engine
}

cmd_down() { oid down "$@"; }

# ---- test and demo ----------------------------------------------------------

# shellcheck source=hack/ovs-in-docker/tests.sh
. hack/ovs-in-docker/tests.sh
# shellcheck source=hack/ovs-in-docker/cluster.sh
. hack/ovs-in-docker/cluster.sh

usage() { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0 # sourced
cmd=${1:-}
(($#)) && shift
case $cmd in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
exec | restart | pid | stats | kubectl | build) exec "$OID_TOOL" "$cmd" "$@" ;;
deploy | image | bench) exec "$OID_TOOL" "$cmd" "$@" ;;
test) cmd_test "$@" ;;
demo) cmd_demo "$@" ;;
conformance) exec "$OID_TOOL" conformance "$@" ;;
*) usage ;;
esac
