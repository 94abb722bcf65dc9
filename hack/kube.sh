#!/usr/bin/env bash
# kube.sh: a real single-node Kubernetes around this suite's OVS node, for tests
# and by hand. etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy, containerd and kubelet all run inside the network namespace of a
# private OVS sandbox (hack/ovs-sandbox.sh) and in a mount namespace of their
# own, so nothing of theirs is left in the root namespaces once they stop.
#
#   hack/kube.sh install   build and cache the binaries (Go module proxy), apt-get runc and
#                          debootstrap, build the images (pause, test app, the DaemonSet's)
#   hack/kube.sh image     rebuild only the DaemonSet's image (after a change in deploy/ or cmd/)
#   hack/kube.sh up        start the cluster; prints KUBECTL= NODE= NETNS= STATE=
#   hack/kube.sh deploy    import the DaemonSet's image, kubectl apply deploy/ovsflow-cni.yaml
#   hack/kube.sh kubectl ARGS...   kubectl against the cluster (from the node's namespaces)
#   hack/kube.sh node CMD...       run CMD in the node's network and mount namespaces
#   hack/kube.sh restart-kubelet   start kubelet again (after a test stopped it)
#   hack/kube.sh down      stop everything, remove every file, mount, link and cgroup it made
#   hack/kube.sh test      install, up, deploy, the Go tests of test/kube inside the node, down:
#                          a line per test, then "N passed, M failed" (KEEP=1: the cluster is left up)
#
# Binaries and images are cached under $OVSFLOW_KUBE_PREFIX (default /opt/ovsflow-kube;
# the Go build cache is Go's own). The running cluster lives under /run/ovsflow-kube/okube.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
export DEBIAN_FRONTEND=noninteractive

rt_prefix=${OVSFLOW_RT_PREFIX:-/opt/ovsflow-rt} # hack/install-runtimes.sh's images

log() { echo "kube.sh: $*" >&2; }

# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh # (the script runs from the repository root)
# shellcheck source=hack/lib/kube.sh
. hack/lib/kube.sh # the build, PKI, configs and image tar shared with hack/ovs-in-docker.sh
# shellcheck source=hack/lib/oid.sh
. hack/lib/oid.sh # the harness's Go tool: the PKI
prefix=$kube_prefix

install_all() {
	[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
	command -v go >/dev/null || { log "go toolchain missing"; exit 1; }
	mkdir -p "$prefix/bin"
	exec 8>"$prefix/.lock"
	flock 8
	hack/ovs-sandbox.sh install
	apt_install runc debootstrap curl iptables conntrack
	kube_build_containerd
	kube_build_etcd
	kube_build_kube
	# The cluster DNS of hack/ovs-in-docker.sh up -kube (not of this single
	# node): built here so that CI's prefetch fills the cache with it too.
	kube_build_coredns
	# The pause and test app images of the runtime suites, and the DaemonSet's.
	OVSFLOW_RT_PREFIX=$rt_prefix hack/install-runtimes.sh images >/dev/null
	ds_image_tar
}


# --- the running cluster ------------------------------------------------------
#
# Topology (all addresses exist only inside the two network namespaces):
#
#   netns okube-ext ("outside")          netns okube-node (the node: OVS sandbox + Kubernetes)
#   eth0 203.0.113.20/25 ──── veth ──── okube-up ── br0 (OVS, netdev) 203.0.113.10/25
#        2001:db8:15::20/64                             2001:db8:15::10/64
#                                                   pods: 198.51.100.0/24, 2001:db8:15:100::/56
#                                                   (a /25 and a /64 per node, by the node
#                                                   IPAM controller); services 203.0.113.128/25,
#                                                   2001:db8:15:ffff::/112
#
# etcd, the control plane, containerd and kubelet run in netns okube-node and in
# a mount namespace of their own in which /run/openvswitch is the sandbox's run
# directory and /opt/cni/bin, /etc/cni/net.d, /var/lib/kubelet, /var/log/pods,
# /var/log/containers, /var/lib/cni and /run/containerd are directories under
# $state. Their processes sit in cgroup pids:/$tag-sys, pods under /$tag (kubelet's
# cgroupRoot), so teardown finds every one of them by cgroup.
tag=okube
sb=$tag-node                  # the OVS sandbox (hack/ovs-sandbox.sh) and its netns
ext=$tag-ext                  # the outside client's netns
state=/run/ovsflow-kube/$tag
ovsrun=/run/ovsflow/$sb
node=$tag-node                # the Node's name
node_v4=203.0.113.10 node_v6=2001:db8:15::10
ext_v4=203.0.113.20 ext_v6=2001:db8:15::20
lan_v4=25 lan_v6=64
pod_cidrs=198.51.100.0/24,2001:db8:15:100::/56
svc_cidrs=203.0.113.128/25,2001:db8:15:ffff::/112
svc_v4=203.0.113.129 svc_v6=2001:db8:15:ffff::1
# Paths that get a private directory inside the node's mount namespace.
node_dirs=(/run/openvswitch /opt/cni/bin /etc/cni/net.d /var/lib/kubelet /var/log/pods
	/var/log/containers /var/lib/cni /run/containerd)
# Kernel-wide sysctls kubelet sets at start (kube_kubelet_sysctls): recorded
# at `up`, restored at `down`.

# in_node CMD...: CMD in the node's network and mount namespaces.
in_node() { nsenter --mount="$state/ns/mnt" --net="/run/netns/$sb" -- "$@"; }
kctl() { in_node "$prefix/bin/kubectl" --kubeconfig "$state/pki/admin.kubeconfig" "$@"; }

pki() {
	local d=$state/pki
	oid_build "$tag" || exit 1
	kube_ca "$d" "$tag"
	kube_control_plane_certs "$d" "$tag" "DNS:$node,IP:127.0.0.1,IP:$node_v4,IP:$node_v6,IP:$svc_v4,IP:$svc_v6" "https://$node_v4:6443"
	kube_node_cert "$d" kubelet "$node" "DNS:$node,IP:$node_v4,IP:$node_v6" "https://$node_v4:6443" "$tag"
}

# node_net: the OVS sandbox as the node, its uplink to the outside netns.
node_net() {
	eval "$(hack/ovs-sandbox.sh start "$sb" | grep -E '^(OVSDB|NETNS|RUNDIR)=')"
	local vs=(ovs-vsctl "--db=$OVSDB" --timeout=10)
	# br0 as deploy/node-prep.sh makes it: fail_mode=secure, tagged as the
	# suite's, and its base flow installed by ovs-portmap reconcile (the
	# DaemonSet image's binary, built by install) before the uplink is a port.
	local pm=$prefix/build/ds/out/ovs-portmap
	[ -x "$pm" ] || { log "no $pm: run hack/kube.sh install first"; return 1; }
	"${vs[@]}" add-br br0 -- set bridge br0 datapath_type=netdev fail_mode=secure \
		external_ids:ovsflow.io/owner=ovsflow-cni
	for _ in $(seq 50); do
		ip netns exec "$sb" "$pm" reconcile -ovsdb "$OVSDB" >/dev/null 2>&1 && break
		sleep 0.1
	done
	ip netns exec "$sb" "$pm" reconcile -ovsdb "$OVSDB" >&2
	ip netns add "$ext"
	ip -n "$ext" link set lo up
	ip -n "$sb" link add "$tag-up" type veth peer name eth0 netns "$ext"
	# The uplink is an OVS port: keep the node's own IP stack off it (docker-notes.md).
	ip netns exec "$sb" sysctl -qw "net.ipv4.conf.$tag-up.arp_ignore=8" "net.ipv6.conf.$tag-up.disable_ipv6=1"
	ip -n "$sb" link set "$tag-up" up
	"${vs[@]}" add-port br0 "$tag-up"
	ip -n "$sb" addr add "$node_v4/$lan_v4" dev br0
	ip -n "$sb" addr add "$node_v6/$lan_v6" dev br0 nodad
	ip -n "$sb" link set br0 up
	ip netns exec "$sb" ethtool -K br0 tx off >/dev/null
	ip -n "$sb" route add default via "$ext_v4"
	ip -n "$sb" -6 route add default via "$ext_v6"
	ip netns exec "$sb" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
	ip -n "$ext" addr add "$ext_v4/$lan_v4" dev eth0
	ip -n "$ext" addr add "$ext_v6/$lan_v6" dev eth0 nodad
	ip -n "$ext" link set eth0 up
	ip netns exec "$ext" ethtool -K eth0 tx off >/dev/null
	ip -n "$ext" route add "${pod_cidrs%,*}" via "$node_v4"
	ip -n "$ext" -6 route add "${pod_cidrs#*,}" via "$node_v6"
}

# node_mounts: the node's mount namespace, kept by a bind mount of its file.
node_mounts() {
	mkdir -p "$state/ns" "$state/node"
	mount --bind "$state/ns" "$state/ns"
	mount --make-private "$state/ns"
	touch "$state/ns/mnt"
	local d created=()
	for d in "${node_dirs[@]}"; do
		# A mount point the host lacks is made and recorded (with the first
		# directory made for it), to be removed at down.
		if [ ! -e "$d" ]; then
			local top=$d
			while [ ! -e "$(dirname "$top")" ]; do top=$(dirname "$top"); done
			mkdir -p "$d"
			echo "$top $d" >>"$state/created-dirs"
		fi
		mkdir -p "$state/node$d"
	done
	unshare --mount="$state/ns/mnt" --propagation private true
	# Shared inside the node (new peer groups: nothing reaches the host), as
	# a host's mounts are under systemd: the DaemonSet mounts /var/run/netns
	# with HostToContainer propagation, which needs a shared or slave source.
	in_node mount --make-rshared /
	in_node mount --bind "$ovsrun" /run/openvswitch
	for d in "${node_dirs[@]:1}"; do in_node mount --bind "$state/node$d" "$d"; done
}

# spawn NAME CMD...: CMD in the node's namespaces, in cgroup pids:/$tag-sys, in the
# background; its pid in $state/pid/NAME, its output in $state/log/NAME.log.
spawn() {
	local name=$1
	shift
	mkdir -p "$state/pid" "$state/log"
	setsid bash -c 'echo $$ > /sys/fs/cgroup/pids/'"$tag"'-sys/cgroup.procs; exec "$@"' spawn \
		nsenter --mount="$state/ns/mnt" --net="/run/netns/$sb" -- "$@" \
		>"$state/log/$name.log" 2>&1 </dev/null &
	echo $! >"$state/pid/$name"
	disown # (no job report when down kills it, from the shell of `test`)
}

# wait_for WHAT SECONDS CMD...: retries CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	log "timed out after ${secs}s waiting for $what"
	return 1
}

containerd_config() {
	local d=$state/containerd
	kube_containerd_config "$d/config.toml" "$d/root" "$d/state" "$d/containerd.sock" "$d/containerd-ttrpc.sock"
}

kubelet_config() {
	kube_kubelet_config "$state/kubelet.yaml" "$state/pki" kubelet "$state/containerd/containerd.sock" "/$tag"
	kube_proxy_config "$state/proxy.yaml" "$state/pki/proxy.kubeconfig" "$node" "$pod_cidrs"
}

up() {
	[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
	[ -e "$state" ] && down
	# A cluster that does not come up is removed: nothing is left half-started.
	trap 'trap - ERR; log "up failed (logs were in $state/log); tearing down"; tail -n 8 "$state"/log/*.log >&2 || true; down; exit 1' ERR
	local t0=$SECONDS
	mkdir -p "$state"
	local s
	for s in "${kube_kubelet_sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$state/sysctls"
	# kubelet's cgroupRoot must exist in every hierarchy, named ones too (a new
	# cpuset needs CPUs and memory nodes).
	local h
	for h in /sys/fs/cgroup/*/; do mkdir -p "$h$tag"; done
	if [ -d /sys/fs/cgroup/cpuset/$tag ]; then
		cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$tag/cpuset.cpus
		cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$tag/cpuset.mems
	fi
	mkdir -p "/sys/fs/cgroup/pids/$tag-sys"
	node_net
	node_mounts
	pki
	containerd_config
	kubelet_config
	local p=$state/pki
	kube_etcd_cmd "$prefix/bin/etcd" "$state/etcd" "$tag"
	spawn etcd "${kube_cmd[@]}"
	wait_for "etcd" 30 in_node curl -sf http://127.0.0.1:2379/health
	kube_apiserver_cmd "$prefix/bin/kube-apiserver" "$p" "$node_v4" "$svc_cidrs"
	spawn kube-apiserver "${kube_cmd[@]}"
	wait_for "kube-apiserver" 60 kctl get --raw /readyz
	kube_controller_manager_cmd "$prefix/bin/kube-controller-manager" "$p" "$pod_cidrs" "$svc_cidrs" 25 64
	spawn kube-controller-manager "${kube_cmd[@]}"
	kube_scheduler_cmd "$prefix/bin/kube-scheduler" "$p"
	spawn kube-scheduler "${kube_cmd[@]}"
	spawn containerd env PATH="$prefix/bin:$PATH" "$prefix/bin/containerd" --config "$state/containerd/config.toml"
	wait_for "containerd" 30 in_node "$prefix/bin/ctr" --address "$state/containerd/containerd.sock" version
	local img
	for img in "$rt_prefix/images/pause.tar" "$rt_prefix/images/app.tar"; do
		in_node "$prefix/bin/ctr" --address "$state/containerd/containerd.sock" -n k8s.io images import "$img" >/dev/null
	done
	start_kubelet
	spawn kube-proxy "$prefix/bin/kube-proxy" --config "$state/proxy.yaml"
	wait_for "node $node" 60 kctl get node "$node"
	wait_for "the default ServiceAccount" 60 kctl -n default get serviceaccount default
	wait_for "the node's podCIDRs" 60 sh -c "[ -n \"\$($(printf '%q ' nsenter --mount="$state/ns/mnt" --net="/run/netns/$sb" -- "$prefix/bin/kubectl" --kubeconfig "$p/admin.kubeconfig") get node $node -o jsonpath='{.spec.podCIDRs}')\" ]"
	trap - ERR
	log "cluster up in $((SECONDS - t0)) s"
	print_env
}

start_kubelet() {
	spawn kubelet env PATH="$prefix/bin:$PATH" "$prefix/bin/kubelet" --config "$state/kubelet.yaml" \
		--kubeconfig "$state/pki/kubelet.kubeconfig" --hostname-override "$node" \
		--node-ip "$node_v4,$node_v6"
}

print_env() {
	echo "KUBECTL='$repo/hack/kube.sh kubectl'"
	echo "NODE=$node"
	echo "NETNS=$sb"
	echo "EXTNS=$ext"
	echo "OVSDB=unix:$ovsrun/db.sock"
	echo "STATE=$state"
}

# ds_image_tar: the DaemonSet's image (kube_ds_image_tar), at $prefix/images/ovs-cni.tar.
ds_image_tar() { kube_ds_image_tar "$prefix/build/ds" "$prefix/images/ovs-cni.tar"; }

deploy() {
	in_node "$prefix/bin/ctr" --address "$state/containerd/containerd.sock" -n k8s.io images import "$prefix/images/ovs-cni.tar" >/dev/null
	kctl apply -f - <deploy/ovsflow-cni.yaml
	kctl -n kube-system rollout status daemonset/ovsflow-cni --timeout=120s >&2
}

# kill_cgroup DIR: SIGKILL every process of a cgroup tree, until none is left.
kill_cgroup() {
	local i pids
	for i in $(seq 50); do
		pids=$(find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)
		[ -n "$pids" ] || return 0
		kill -9 $pids 2>/dev/null || true
		sleep 0.1
	done
	log "processes left in $1: $pids"
}

# rm_cgroup DIR: removes a cgroup tree, deepest first.
rm_cgroup() {
	[ -d "$1" ] || return 0
	find "$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
}

down() {
	[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
	local f name pid
	# Daemons first (SIGTERM, then SIGKILL), kubelet before containerd.
	for name in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do
		f=$state/pid/$name
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		rm -f "$f"
	done
	# Whatever is left: the containerd shims, the pods' processes.
	kill_cgroup "/sys/fs/cgroup/pids/$tag-sys"
	kill_cgroup "/sys/fs/cgroup/pids/$tag"
	local h
	for h in /sys/fs/cgroup/*/; do rm_cgroup "$h$tag"; done
	rm_cgroup "/sys/fs/cgroup/pids/$tag-sys"
	# The mount namespace ends with its last process and its bind-mounted file.
	if mountpoint -q "$state/ns" 2>/dev/null; then
		umount "$state/ns/mnt" 2>/dev/null || true
		umount "$state/ns"
	fi
	hack/ovs-sandbox.sh stop "$sb"
	[ -e "/run/netns/$ext" ] && ip netns del "$ext"
	if [ -f "$state/sysctls" ]; then
		while IFS= read -r s; do sysctl -qw "$s"; done <"$state/sysctls"
	fi
	# The mount points made at up: empty in this namespace (their mounts were
	# the node's only); rmdir, so that nothing another process put there is lost.
	if [ -f "$state/created-dirs" ]; then
		while IFS=' ' read -r top d; do
			while [ "${#d}" -ge "${#top}" ] && rmdir "$d" 2>/dev/null; do d=$(dirname "$d"); done
		done <"$state/created-dirs"
	fi
	rm -rf --one-file-system "$state"
	rmdir /run/ovsflow-kube 2>/dev/null || true
}

# run_tests: the single-node suite. The Go tests of test/kube run inside the
# node (its network and mount namespaces: the routes the agent makes, the
# node's OVSDB) against the API server, after the DaemonSet is up; what a
# cluster of several nodes shows is test/cluster's (hack/ovs-in-docker.sh
# test -kube). Without root it says so and skips (in CI, with CI set, it fails).
run_tests() {
	if [ "$(id -u)" != 0 ]; then
		echo "*** hack/kube.sh test: not root: the Kubernetes suite is SKIPPED ***" >&2
		[ -n "${CI:-}" ] && exit 1
		exit 0
	fi
	local t0=$SECONDS t dir rc=0 pass fail
	dir=$(mktemp -d /var/tmp/okube-test.XXXXXX)
	# shellcheck disable=SC2064 # $dir now
	trap "rc=\$?; [ -n \"\${KEEP:-}\" ] || down; rm -rf '$dir'; exit \$rc" EXIT
	t=$SECONDS
	(install_all) # (a subshell: its lock on the cache ends with it)
	go test -c -o "$dir/kube.test" ./test/kube
	echo "# built or cached in $((SECONDS - t)) s"
	t=$SECONDS
	up >/dev/null
	deploy
	echo "# cluster up and the DaemonSet rolled out in $((SECONDS - t)) s"
	in_node env OVSFLOW_KUBECONFIG="$state/pki/admin.kubeconfig" "$dir/kube.test" \
		-test.count=1 -test.v -test.timeout=10m >"$dir/out" 2>&1 || rc=$?
	cat "$dir/out"
	pass=$(grep -c '^--- PASS' "$dir/out" || true)
	# A skip with the cluster up is a defect, not a pass.
	fail=$(grep -cE '^--- (FAIL|SKIP)' "$dir/out" || true)
	if ((fail)) || [ "$rc" != 0 ] || [ "$pass" = 0 ]; then
		echo "--- diagnostics"
		kctl get pods -A -o wide 2>&1 | head -40 || true
		kctl get events -A --sort-by=.lastTimestamp 2>&1 | tail -30 || true
		local f
		for f in kubelet containerd kube-controller-manager; do
			echo "--- $f.log (tail)"
			tail -15 "$state/log/$f.log" 2>/dev/null || true
		done
		[ "$rc" != 0 ] && [ "$fail" = 0 ] && fail=1 # the binary failed outside any test
	fi
	echo "$pass passed, $fail failed ($((SECONDS - t0)) s)"
	((fail == 0 && pass > 0))
}

cmd=${1:-}
shift || true
case $cmd in
install) install_all ;;
image) ds_image_tar ;;
up) up ;;
down) down ;;
deploy) deploy ;;
env) print_env ;;
kubectl) kctl "$@" ;;
node) in_node "$@" ;;
restart-kubelet) start_kubelet ;;
test) run_tests ;;
*)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
