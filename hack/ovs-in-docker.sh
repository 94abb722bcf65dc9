#!/usr/bin/env bash
# ovs-in-docker.sh: a multi-node harness. Each node is a Docker container
# running Open vSwitch (ovsdb-server + ovs-vswitchd), containerd with its CRI
# plugin and crictl, and the plugins (deploy/install-cni.sh with the node's
# own pod ranges, and `ovs-portmap reconcile -watch`, what the DaemonSet's
# agent does in-process). The nodes share one Docker network; each node's
# uplink is its container interface, a port of br0 (deploy/node-prep.sh);
# without -kube the harness routes the other nodes' pod CIDRs, with -kube
# the DaemonSet's agent does.
#
#   hack/ovs-in-docker.sh up [-nodes N]   start N nodes (default 2, at most 4); one line per node:
#                                           NODE <name> <node IPv4> <node IPv6> <pod IPv4 CIDR> <pod IPv6 CIDR>
#   hack/ovs-in-docker.sh exec NODE CMD...  run CMD in a node (stdin passed through, its exit status)
#   hack/ovs-in-docker.sh restart NODE    docker restart of a node, until it has booted again
#   hack/ovs-in-docker.sh test [-nodes N] up (default 3 nodes), the Go tests of test/multinode, "N passed, M failed", down
#   hack/ovs-in-docker.sh demo            up, a host port pod on each node reached across nodes and from here, down
#   hack/ovs-in-docker.sh down [-images]  remove the nodes, network, volumes (and the images with -images);
#                                         stops the private dockerd if this script started it. Idempotent.
#
# A Kubernetes cluster (hack/ovs-in-docker/cluster.sh; the binaries of hack/lib/kube.sh's cached build):
#   hack/ovs-in-docker.sh up -kube [-multus] [-nodes N]  a control-plane container (cp) and N nodes (default 3, at most 4)
#                                         running containerd 2.x, kubelet, kube-proxy; one line per node:
#                                           NODE <name> <node IPv4> <node IPv6> <pod CIDRs from its Node object>
#                                         and KUBECONFIG=<the admin's kubeconfig>; -multus: deploy puts Multus
#                                         (thin plugin, hack/lib/kube.sh's cached build) in front of ovsflow
#   hack/ovs-in-docker.sh kubectl ARGS...  kubectl against the cluster
#   hack/ovs-in-docker.sh deploy          the DaemonSet's image (this tree) into every node, deploy/ovsflow-cni.yaml applied,
#                                         then the cluster DNS (CoreDNS, deploy/coredns.yaml) until Ready
#                                         (after up -kube -multus: then deploy/multus.yaml and Multus on every node)
#   hack/ovs-in-docker.sh image TAG       another image of this tree, tagged and stamped TAG, into every node
#                                         (for an upgrade: kubectl set image); prints IMAGE=<name>
#   hack/ovs-in-docker.sh stats [SECONDS] CPU and memory of each container and of each node's pods
#   hack/ovs-in-docker.sh test -kube [-nodes N] [-conformance]  up -kube, deploy, (-conformance: conformance's default
#                                         selection first, on the fresh cluster), the Go tests of test/cluster; then Multus
#                                         in front and its tests; down
#   hack/ovs-in-docker.sh demo -kube [-nodes N]  up -kube, deploy, hostPort pods on every node reached across nodes and from here, down
#   hack/ovs-in-docker.sh bench -kube [-nodes N] [-pods P] [-idle S]  a benchmark (hack/ovs-in-docker/bench.sh):
#                                         up -kube (default 3 nodes), deploy; for ovsflow, then the reference chain
#                                         (containernetworking/plugins bridge + host-local + portmap) in its place:
#                                         P pods per node (default 110) of one hostPort each scaled up until all are
#                                         Ready and down until all are gone, the node agent's RSS and CPU (idle S s,
#                                         default 30, with no pods and with all); the tables; down. IPv6-only pods.
#   hack/ovs-in-docker.sh conformance [-selection default|network] [-focus RE] [-skip RE] [-chain ovsflow|reference]
#                                         [-procs P] [-nodes N] [-build]  Kubernetes' own e2e suite (e2e.test,
#                                         hack/ovs-in-docker/conformance.sh): builds it and its images, up -kube and deploy
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
STATE=/run/$P          # private dockerd: socket, pid, exec root
DATA=/var/lib/$P       # private dockerd's data root (the image cache)
NET4=${OID_NET4:-203.0.113.160/27}
NET6=${OID_NET6:-2001:db8:10::/64}
POD4=${OID_POD4:-198.51.100.0/24}
MIRROR=${OID_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# The base image's packages (debootstrap --include); the image is rebuilt when this changes.
BASE_PACKAGES="openvswitch-switch iproute2 iputils-ping ethtool nftables procps kmod containerd runc util-linux iptables conntrack"

log() { echo "ovs-in-docker: $*" >&2; }
die() { log "$*"; exit 1; }

# ---- the engine -----------------------------------------------------------

engine_answers() { timeout 20 docker ${1:+-H "$1"} info >/dev/null 2>&1; }

# engine makes `docker` talk to an engine: the one at $DOCKER_HOST or
# /var/run/docker.sock, else ours (started when $1 is "start").
engine() {
	if [ -n "${DOCKER_HOST:-}" ]; then
		engine_answers "$DOCKER_HOST" && return 0
		die "DOCKER_HOST=$DOCKER_HOST does not answer"
	fi
	if [ -S /var/run/docker.sock ] && engine_answers unix:///var/run/docker.sock; then
		export DOCKER_HOST=unix:///var/run/docker.sock
		return 0
	fi
	export DOCKER_HOST=unix://$STATE/docker.sock
	engine_answers "$DOCKER_HOST" && return 0
	[ "${1:-}" = start ] || return 1
	[ "$(id -u)" = 0 ] || die "no Docker engine answers, and starting one needs root"
	[ -f /etc/debian_version ] || die "no Docker engine answers (installing one is done on Debian only)"
	apt_install docker.io
	mkdir -p "$STATE" "$DATA"
	log "starting a private dockerd ($STATE/docker.sock, data root $DATA/docker)"
	# setsid: the engine outlives this script (up ... down).
	setsid dockerd --data-root "$DATA/docker" --exec-root "$STATE/exec" -H "$DOCKER_HOST" \
		--pidfile "$STATE/dockerd.pid" --iptables=false --ip6tables=false --bridge=none \
		--ip-forward=false --ip-masq=false >"$STATE/dockerd.log" 2>&1 </dev/null &
	echo "$!" >"$STATE/started-by-us"
	for _ in $(seq 100); do
		engine_answers "$DOCKER_HOST" && return 0
		kill -0 "$(cat "$STATE/started-by-us")" 2>/dev/null || break
		sleep 0.3
	done
	tail -20 "$STATE/dockerd.log" >&2
	die "the private dockerd did not come up"
}

stop_engine() {
	[ -f "$STATE/started-by-us" ] || return 0
	local pid
	pid=$(cat "$STATE/started-by-us")
	if kill -0 "$pid" 2>/dev/null; then
		log "stopping the private dockerd (pid $pid)"
		kill "$pid"
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
	fi
	rm -rf "$STATE"
}

# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh # (the script runs from the repository root)

# ---- the images -----------------------------------------------------------

base_image() {
	echo "$P-base:$(echo "$SUITE $MIRROR $BASE_PACKAGES" | sha256sum | cut -c1-12)"
}

# build_base makes the base image from Debian packages unless it exists.
build_base() {
	local img
	img=$(base_image)
	docker image inspect "$img" >/dev/null 2>&1 && return 0
	apt_install debootstrap
	local root
	root=$(mktemp -d "/var/tmp/$P-rootfs.XXXXXX")
	log "debootstrap $SUITE (${BASE_PACKAGES// /,}) for $img"
	local t0=$SECONDS
	if ! debootstrap --variant=minbase --include="${BASE_PACKAGES// /,}" "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1; then
		tail -20 "$root.log" >&2
		rm -rf "$root" "$root.log"
		die "debootstrap failed"
	fi
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
	tar -C "$root" -c . | docker import -c "LABEL $LABEL" - "$img" >/dev/null
	rm -rf "$root" "$root.log"
	log "base image $img built in $((SECONDS - t0)) s"
}

# version is what the plugins and the node image are stamped with: $VERSION,
# else `git describe` of a v* tag, else the manifest's release plus the commit.
version() {
	if [ -n "${VERSION:-}" ]; then echo "$VERSION"; return; fi
	git describe --tags --match 'v*' --dirty 2>/dev/null && return
	local rel
	rel=$(sed -n 's|.*image: ghcr.io/ovsflow/ovs-cni:\(v[0-9][0-9.]*\)$|\1|p' deploy/ovsflow-cni.yaml | sed -n 1p)
	echo "${rel:-v0.0.0}+git.$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo .dirty)"
}

node_image() { echo "$P-node:latest"; }

# build_node builds the node image (hack/ovs-in-docker/Dockerfile) on the base image.
build_node() {
	local ver ctx t0=$SECONDS
	ver=$(version)
	ctx=$(mktemp -d "/var/tmp/$P-ctx.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$ctx'" RETURN
	mkdir -p "$ctx/bin" "$ctx/images" "$ctx/deploy" "$ctx/node"
	local rt
	rt=$(hack/install-runtimes.sh containerd) # crictl, the pause and app image tars
	local CRICTL PAUSE_TAR APP_TAR
	CRICTL=$(sed -n 's/^CRICTL=//p' <<<"$rt")
	PAUSE_TAR=$(sed -n 's/^PAUSE_TAR=//p' <<<"$rt")
	APP_TAR=$(sed -n 's/^APP_TAR=//p' <<<"$rt")
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/ovsflow/ovs-cni/pkg/buildinfo.Version=$ver" \
		-o "$ctx/bin/" ./cmd/ovs-bridge ./cmd/ovs-portmap ./cmd/ovs-bandwidth ./cmd/ovsflow-conflist ./cmd/ovsflow-agent \
		github.com/containernetworking/plugins/plugins/ipam/host-local \
		github.com/containernetworking/plugins/plugins/main/loopback
	cp "$CRICTL" "$ctx/bin/crictl"
	cp "$PAUSE_TAR" "$APP_TAR" "$ctx/images/"
	cp deploy/install-cni.sh deploy/node-prep.sh "$ctx/deploy/"
	# The ConfigMap's conflist, as the DaemonSet mounts it.
	awk '/^  10-ovsflow.conflist: \|$/ {on=1; next} on && /^---/ {exit} on {sub(/^    /, ""); print}' \
		deploy/ovsflow-cni.yaml >"$ctx/deploy/10-ovsflow.conflist"
	[ -s "$ctx/deploy/10-ovsflow.conflist" ] || die "no conflist found in deploy/ovsflow-cni.yaml's ConfigMap"
	cp hack/ovs-in-docker/{node-init.sh,cp-init.sh,oid-reconcile,oid-pod,oid-snapshot,containerd.toml,crictl.yaml} hack/lib/kube.sh "$ctx/node/"
	DOCKER_BUILDKIT=0 docker build -q --label "$LABEL" --build-arg BASE="$(base_image)" --build-arg VERSION="$ver" \
		-t "$(node_image)" -f hack/ovs-in-docker/Dockerfile "$ctx" \
		2> >(grep -v -e DEPRECATED -e BuildKit -e environment-variable -e '^$' >&2) >/dev/null
	log "node image $(node_image) ($ver) ready in $((SECONDS - t0)) s"
}

# ---- the nodes --------------------------------------------------------------

# Addresses: node i (1-based) of the network NET4/NET6, its pod CIDRs.
net4_base() { local n=${NET4%/*}; echo "${n%.*}"; }
net4_last() { local n=${NET4%/*}; echo "${n##*.}"; }
gw4() { echo "$(net4_base).$(($(net4_last) + 1))"; }
node4() { echo "$(net4_base).$(($(net4_last) + 1 + $1))"; }
gw6() { echo "${NET6%::/*}::1"; }
node6() { echo "${NET6%::/*}::$(printf %x $((1 + $1)))"; }
pod4() { local n=${POD4%/*}; echo "${n%.*}.$((64 * ($1 - 1)))/26"; }
first4() { local p; p=$(pod4 "$1"); p=${p%/*}; echo "${p%.*}.$((${p##*.} + 1))"; }
pod6() { echo "${OID_POD6:-${NET6%::/*}}:$1::/64"; }
datapath() { if [ -d /sys/module/openvswitch ]; then echo system; else echo netdev; fi; }

nodes() { docker ps -a --filter "label=$LABEL" --format '{{.Names}}' | sed "s/^$P-//" | sort; }

wait_ready() { # NODE: until node-init.sh says ready (or the container stops)
	local c=$P-$1
	for _ in $(seq 300); do
		docker exec "$c" test -f /run/oid/ready 2>/dev/null && return 0
		[ "$(docker inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" = true ] || break
		sleep 0.3
	done
	docker logs --tail 30 "$c" >&2 || true
	log "node $1 did not become ready"
	return 1
}

node_line() { # I
	echo "NODE n$1 $(node4 "$1") $(node6 "$1") $(pod4 "$1") $(pod6 "$1")"
}

cmd_up() {
	local n="" kube=0 multus=0
	while (($#)); do
		case $1 in
		-nodes) n=$2; shift 2 ;;
		-kube) kube=1; shift ;;
		-multus) multus=1; shift ;;
		*) die "up: unknown argument $1" ;;
		esac
	done
	[ -n "$n" ] || n=$((kube ? 3 : 2))
	((multus == 0 || kube)) || die "up: -multus needs -kube"
	((n >= 1 && n <= 4)) || die "up: -nodes $n: want 1 to 4"
	if ((kube)) && [ "$KPOD4" != none ]; then
		# The node IPAM controller gives each Node one range of the cluster
		# CIDR: a Node it has none for never runs a pod.
		local plen=${KPOD4#*/}
		((KMASK4 >= plen && (1 << (KMASK4 - plen)) >= n)) ||
			die "up -kube: -nodes $n: the IPv4 cluster CIDR $KPOD4 (OID_KPOD4, else OID_POD4) holds $((KMASK4 >= plen ? 1 << (KMASK4 - plen) : 0)) range(s) of /$KMASK4 (OID_KMASK4): a larger CIDR, a longer mask or fewer nodes"
	fi
	[ "$(id -u)" = 0 ] || [ -n "${DOCKER_HOST:-}" ] || [ -w /var/run/docker.sock ] || die "up: needs root (or a Docker engine of yours)"
	engine start
	local t0=$SECONDS
	build_base
	build_node
	remove_nodes
	((kube)) && kube_prepare "$n" "$multus"
	docker network create --label "$LABEL" --driver bridge \
		--subnet "$NET4" --gateway "$(gw4)" --ipv6 --subnet "$NET6" --gateway "$(gw6)" \
		-o com.docker.network.bridge.enable_ip_masquerade=false -o com.docker.network.bridge.name="${P:0:15}" \
		"$P-net" >/dev/null
	# The Docker host's own packets to the nodes carry their checksums (the
	# nodes' userspace conntrack drops those left to offload).
	if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then apt_install ethtool; fi
	ethtool -K "${P:0:15}" tx off >/dev/null 2>&1 ||
		log "warning: could not turn TX checksum offload off on ${P:0:15}: the nodes may drop this host's connections to host ports"
	local dp i j routes mode
	dp=$(datapath)
	local t1=$SECONDS
	((kube)) && kube_control_plane
	for ((i = 1; i <= n; i++)); do
		if ((kube)); then
			# The Node object's pod CIDRs (node IPAM); no routes (the node agent's).
			# shellcheck disable=SC2207
			# IPv6 on in the node's netns ("all": kube-proxy programs no IPv6 rules
			# when it is off there; node-prep.sh turns it off on the uplink again).
			mode=($(kube_mounts) -e OID_NODE_IPS="$(node4 "$i"),$(node6 "$i")" --device /dev/kmsg
				--sysctl net.ipv6.conf.all.disable_ipv6=0)
		else
			routes=""
			for ((j = 1; j <= n; j++)); do
				((j != i)) && routes+="${routes:+,}$(pod4 "$j") via $(node4 "$j"),$(pod6 "$j") via $(node6 "$j")"
			done
			mode=(-e OVSFLOW_POD_CIDRS="$(pod4 "$i"),$(pod6 "$i")" -e OID_ROUTES="$routes")
		fi
		docker volume create --label "$LABEL" "$P-n$i-containerd" >/dev/null
		docker run -d --name "$P-n$i" --hostname "n$i" --label "$LABEL" \
			--network "$P-net" --ip "$(node4 "$i")" --ip6 "$(node6 "$i")" \
			--cap-add ALL --cap-drop SYS_RESOURCE --device /dev/net/tun \
			--security-opt apparmor=unconfined --security-opt seccomp=unconfined --security-opt systempaths=unconfined \
			--cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
			--tmpfs /run:rw,exec,size=256m --tmpfs /tmp:rw,exec,size=256m \
			-v "$P-n$i-containerd:/var/lib/containerd" \
			"${mode[@]}" -e DATAPATH="$dp" -e OID_CGROUP="/$P" \
			"$(node_image)" 2> >(grep -v 'IPv4 forwarding is disabled' >&2) >/dev/null
	done
	for ((i = 1; i <= n; i++)); do wait_ready "n$i" || die "up failed"; done
	((kube)) && kube_wait_nodes "$n"
	log "$n nodes up in $((SECONDS - t1)) s ($((SECONDS - t0)) s with the images); datapath $dp$([ "$dp" = netdev ] && echo " (no openvswitch kernel module on this host)")"
	echo "DATAPATH $dp"
	if ((kube)); then
		for ((i = 1; i <= n; i++)); do kube_node_line "$i"; done
		echo "KUBECONFIG=$(admin_kubeconfig)"
	else
		for ((i = 1; i <= n; i++)); do node_line "$i"; done
	fi
}

# remove_nodes removes the containers, network and volumes of this harness.
remove_nodes() {
	local ids
	ids=$(docker ps -aq --filter "label=$LABEL")
	[ -z "$ids" ] || docker rm -f $ids >/dev/null
	ids=$(docker network ls -q --filter "label=$LABEL")
	[ -z "$ids" ] || docker network rm $ids >/dev/null
	ids=$(docker volume ls -q --filter "label=$LABEL")
	[ -z "$ids" ] || docker volume rm $ids >/dev/null
	# The pods' cgroups (containerd of each node made them under /$P on the host).
	local d try
	for try in 1 2 3 4 5; do
		local left=0
		for d in /sys/fs/cgroup/*/"$P" /sys/fs/cgroup/"$P"; do
			[ -d "$d" ] || continue
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
			[ -d "$d" ] && left=1
		done
		((left)) || break
		sleep 0.5 # the pods' processes are still exiting
	done
	return 0
}

cmd_down() {
	local images=0
	[ "${1:-}" = -images ] && images=1
	if engine; then
		remove_nodes
		if ((images)); then
			local ids
			ids=$(docker images -q --filter "label=$LABEL" | sort -u)
			[ -z "$ids" ] || docker rmi -f $ids >/dev/null
		fi
	fi
	kube_down
	stop_engine
	((images)) && rm -rf "$DATA"
	return 0
}

cmd_exec() {
	(($# >= 2)) || die "exec NODE CMD..."
	engine || die "no engine answers (is the harness up?)"
	local n=$1
	shift
	if [ -t 0 ] && [ -t 1 ]; then
		exec docker exec -it "$P-$n" "$@"
	fi
	exec docker exec -i "$P-$n" "$@"
}

cmd_restart() {
	(($# == 1)) || die "restart NODE"
	engine || die "no engine answers (is the harness up?)"
	docker restart "$P-$1" >/dev/null
	wait_ready "$1"
}

# ---- test and demo ----------------------------------------------------------

# shellcheck source=hack/ovs-in-docker/tests.sh
. hack/ovs-in-docker/tests.sh
# shellcheck source=hack/ovs-in-docker/cluster.sh
. hack/ovs-in-docker/cluster.sh
# shellcheck source=hack/ovs-in-docker/bench.sh
. hack/ovs-in-docker/bench.sh
# shellcheck source=hack/ovs-in-docker/conformance.sh
. hack/ovs-in-docker/conformance.sh

usage() { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0 # sourced
cmd=${1:-}
(($#)) && shift
case $cmd in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
exec) cmd_exec "$@" ;;
restart) cmd_restart "$@" ;;
kubectl) cmd_kubectl "$@" ;;
deploy) cmd_deploy "$@" ;;
image) cmd_image "$@" ;;
stats) cmd_stats "$@" ;;
test) cmd_test "$@" ;;
demo) cmd_demo "$@" ;;
bench) cmd_bench "$@" ;;
conformance) cmd_conformance "$@" ;;
*) usage ;;
esac
