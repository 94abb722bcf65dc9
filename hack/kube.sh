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
#   hack/kube.sh test      install, up, deploy, the checks of test/kube/run.sh, down
#
# Binaries and images are cached under $OVSFLOW_KUBE_PREFIX (default /opt/ovsflow-kube;
# the Go build cache is Go's own). The running cluster lives under /run/ovsflow-kube/okube.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
export DEBIAN_FRONTEND=noninteractive

prefix=${OVSFLOW_KUBE_PREFIX:-/opt/ovsflow-kube}
rt_prefix=${OVSFLOW_RT_PREFIX:-/opt/ovsflow-rt} # hack/install-runtimes.sh's images
kube_version=v1.37.2     # k8s.io/kubernetes; its staging modules are v0.37.2
etcd_version=v3.6.16     # go.etcd.io/etcd/server/v3
containerd_version=v2.4.2
kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)

log() { echo "kube.sh: $*" >&2; }

# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh # (the script runs from the repository root)

# built BIN MODULE VERSION: BIN exists and was built from MODULE at VERSION.
built() {
	[ -x "$1" ] && go version -m "$1" 2>/dev/null |
		grep -Eq "^[[:space:]]+(dep|mod)[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)"
}

# scratch_module DIR NAME: an empty module to build other modules' commands in
# (their go.mod files carry replace directives, so `go install pkg@v` refuses).
scratch_module() {
	mkdir -p "$1"
	printf 'module %s\n\ngo 1.25\n' "$2" >"$1/go.mod"
	rm -f "$1/go.sum" "$1/tools.go"
}

build_kube() {
	local need=0 c
	for c in "${kube_cmds[@]}"; do built "$prefix/bin/$c" k8s.io/kubernetes "$kube_version" || need=1; done
	# The version Kubernetes' own build stamps in (a Node reports its kubelet's).
	[ "$("$prefix/bin/kubelet" --version 2>/dev/null)" = "Kubernetes $kube_version" ] || need=1
	((need)) || return 0
	local m=$prefix/src/kube
	scratch_module "$m" ovsflow.local/kube-build
	(
		cd "$m"
		go mod download -json "k8s.io/kubernetes@$kube_version" >"$m/kubernetes.json"
		local gomod
		gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' "$m/kubernetes.json")
		# The staging modules: k8s.io/kubernetes requires them at v0.0.0 and
		# replaces them with ./staging, which a dependent module ignores.
		local staging
		staging=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod")
		local args=(-require="k8s.io/kubernetes@$kube_version") s
		for s in $staging; do
			case $s in
			k8s.io/sample-cli-plugin | k8s.io/sample-controller)
				# Not served by the proxy, needed by nothing built here: empty local modules.
				mkdir -p "$m/empty/${s#k8s.io/}"
				printf 'module %s\n\ngo 1.25\n' "$s" >"$m/empty/${s#k8s.io/}/go.mod"
				args+=(-replace="$s=./empty/${s#k8s.io/}")
				;;
			*) args+=(-replace="$s=$s@v0.${kube_version#v1.}") ;;
			esac
		done
		go mod edit "${args[@]}"
		local pkgs=()
		for c in "${kube_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
		log "building Kubernetes $kube_version (${kube_cmds[*]}); about 9 minutes cold on 2 cores"
		# go get resolves what these packages import (go mod tidy would also
		# fetch every test dependency of Kubernetes).
		go get "${pkgs[@]}" >&2
		local minor=${kube_version#v1.} x ldflags="-s -w"
		for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ldflags+=" -X $x.gitVersion=$kube_version -X $x.gitMajor=1 -X $x.gitMinor=${minor%%.*} -X $x.gitTreeState=clean"
		done
		CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$prefix/bin/" "${pkgs[@]}"
	)
}

build_etcd() {
	built "$prefix/bin/etcd" go.etcd.io/etcd/server/v3 "$etcd_version" && return 0
	local m=$prefix/src/etcd
	scratch_module "$m" ovsflow.local/etcd-build
	(
		cd "$m"
		go get "go.etcd.io/etcd/server/v3@$etcd_version" >&2
		log "building etcd $etcd_version"
		CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$prefix/bin/etcd" go.etcd.io/etcd/server/v3
	)
}

build_containerd() {
	local c need=0
	for c in containerd containerd-shim-runc-v2 ctr; do
		built "$prefix/bin/$c" github.com/containerd/containerd/v2 "$containerd_version" || need=1
	done
	((need)) || return 0
	log "building containerd $containerd_version"
	GOBIN=$prefix/bin CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' \
		"github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/ctr@$containerd_version"
}

install_all() {
	[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
	command -v go >/dev/null || { log "go toolchain missing"; exit 1; }
	mkdir -p "$prefix/bin"
	exec 8>"$prefix/.lock"
	flock 8
	hack/ovs-sandbox.sh install
	apt_install runc debootstrap curl iptables conntrack
	build_containerd
	build_etcd
	build_kube
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
pause_image=rt.local/ovsflow-pause:1
ds_image=$(sed -n "s/^ *image: *//p" deploy/ovsflow-cni.yaml | sed -n 1p) # the DaemonSet's
# Paths that get a private directory inside the node's mount namespace.
node_dirs=(/run/openvswitch /opt/cni/bin /etc/cni/net.d /var/lib/kubelet /var/log/pods
	/var/log/containers /var/lib/cni /run/containerd)
# Kernel-wide sysctls kubelet sets at start (kernel defaults it wants);
# recorded at `up`, restored at `down`.
kubelet_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# in_node CMD...: CMD in the node's network and mount namespaces.
in_node() { nsenter --mount="$state/ns/mnt" --net="/run/netns/$sb" -- "$@"; }
kctl() { in_node "$prefix/bin/kubectl" --kubeconfig "$state/pki/admin.kubeconfig" "$@"; }

pki() {
	local d=$state/pki
	mkdir -p "$d"
	cd "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=$tag-kube-ca" 2>/dev/null
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	# cert NAME SUBJECT [SAN]
	cert() {
		openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
		local ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
		[ -n "${3:-}" ] && ext="$ext
subjectAltName=$3"
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-out "$1.crt" -extfile <(printf '%s\n' "$ext") 2>/dev/null
		rm -f "$1.csr"
	}
	cert apiserver "/CN=kube-apiserver" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:$node,IP:127.0.0.1,IP:$node_v4,IP:$node_v6,IP:$svc_v4,IP:$svc_v6"
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	cert admin "/O=system:masters/CN=$tag-admin"
	cert controller-manager "/CN=system:kube-controller-manager"
	cert scheduler "/CN=system:kube-scheduler"
	cert proxy "/CN=system:kube-proxy"
	cert kubelet "/O=system:nodes/CN=system:node:$node" "DNS:$node,IP:$node_v4,IP:$node_v6"
	local k
	for k in admin controller-manager scheduler proxy kubelet; do
		cat >"$k.kubeconfig" <<-EOF
			apiVersion: v1
			kind: Config
			clusters:
			- name: $tag
			  cluster: {server: "https://$node_v4:6443", certificate-authority: $d/ca.crt}
			users:
			- name: $k
			  user: {client-certificate: $d/$k.crt, client-key: $d/$k.key}
			contexts:
			- name: $tag
			  context: {cluster: $tag, user: $k}
			current-context: $tag
		EOF
	done
	cd "$repo"
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
	mkdir -p "$d"
	"$prefix/bin/containerd" config default >"$d/default.toml"
	# The default config, with the settings this machine and this node need.
	awk -v root="$d/root" -v st="$d/state" -v sock="$d/containerd.sock" -v ttrpc="$d/containerd-ttrpc.sock" -v pause="$pause_image" '
		/^ *\[/ { sect = $0; gsub(/^ +/, "", sect) }
		/^imports *=/ { print "imports = []"; next }
		/^root *=/ { print "root = \"" root "\""; next }
		/^state *=/ { print "state = \"" st "\""; next }
		sect ~ /server[.]v1[.]grpc.[]]$/ && /^ *address *=/ { print "    address = \"" sock "\""; next }
		sect ~ /server[.]v1[.]ttrpc.[]]$/ && /^ *address *=/ { print "    address = \"" ttrpc "\""; next }
		/^ *sandbox *= *.registry/ { sub(/=.*/, "= \"" pause "\""); print; next }
		/^ *restrict_oom_score_adj *=/ { sub(/=.*/, "= true"); print; next }
		/^ *netns_mounts_under_state_dir *=/ { sub(/=.*/, "= true"); print; next }
		/^ *use_internal_loopback *=/ { sub(/=.*/, "= true"); print; next }
		/^ *max_conf_num *=/ { sub(/=.*/, "= 1"); print; next }
		/^ *stream_server_address *=/ { sub(/=.*/, "= \"127.0.0.1\""); print; next }
		sect ~ /io.containerd.nri.v1.nri/ && /^ *disable *=/ { sub(/=.*/, "= true"); print; next }
		{ print }
	' "$d/default.toml" >"$d/config.toml"
}

kubelet_config() {
	cat >"$state/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		authentication:
		  anonymous: {enabled: false}
		  webhook: {enabled: true}
		  x509: {clientCAFile: $state/pki/ca.crt}
		authorization: {mode: Webhook}
		tlsCertFile: $state/pki/kubelet.crt
		tlsPrivateKeyFile: $state/pki/kubelet.key
		containerRuntimeEndpoint: unix://$state/containerd/containerd.sock
		cgroupDriver: cgroupfs
		cgroupRoot: /$tag
		failCgroupV1: false
		failSwapOn: false
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		resolvConf: /etc/resolv.conf
		staticPodPath: ""
		imageGCHighThresholdPercent: 100
		evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
		syncFrequency: 10s
	EOF
	cat >"$state/proxy.yaml" <<-EOF
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $state/pki/proxy.kubeconfig}
		hostnameOverride: $node
		mode: iptables
		clusterCIDR: "$pod_cidrs"
		healthzBindAddress: 127.0.0.1:10256
		metricsBindAddress: 127.0.0.1:10249
		iptables: {localhostNodePorts: false}
		# Leave the kernel-wide conntrack settings alone.
		conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
	EOF
}

up() {
	[ "$(id -u)" = 0 ] || { log "needs root"; exit 1; }
	[ -e "$state" ] && down
	# A cluster that does not come up is removed: nothing is left half-started.
	trap 'trap - ERR; log "up failed (logs were in $state/log); tearing down"; tail -n 8 "$state"/log/*.log >&2 || true; down; exit 1' ERR
	local t0=$SECONDS
	mkdir -p "$state"
	local s
	for s in "${kubelet_sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$state/sysctls"
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
	spawn etcd "$prefix/bin/etcd" --data-dir "$state/etcd" --name "$tag" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster "$tag=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381
	wait_for "etcd" 30 in_node curl -sf http://127.0.0.1:2379/health
	spawn kube-apiserver "$prefix/bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--advertise-address "$node_v4" --bind-address 0.0.0.0 --secure-port 6443 \
		--service-cluster-ip-range "$svc_cidrs" \
		--client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
		--kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority "$p/ca.crt" --kubelet-preferred-address-types InternalIP \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--allow-privileged=false --profiling=false
	wait_for "kube-apiserver" 60 kctl get --raw /readyz
	spawn kube-controller-manager "$prefix/bin/kube-controller-manager" \
		--kubeconfig "$p/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$p/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$p/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--allocate-node-cidrs --cluster-cidr "$pod_cidrs" \
		--node-cidr-mask-size-ipv4 25 --node-cidr-mask-size-ipv6 64 \
		--service-cluster-ip-range "$svc_cidrs" --profiling=false
	spawn kube-scheduler "$prefix/bin/kube-scheduler" --kubeconfig "$p/scheduler.kubeconfig" \
		--authentication-kubeconfig "$p/scheduler.kubeconfig" --authorization-kubeconfig "$p/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false
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

# ds_image_tar: the DaemonSet's image, as deploy/Dockerfile builds it, without a
# docker engine: the Dockerfile's apt packages on a debootstrap'ed bookworm
# (as debian:12-slim), the static plugins built from this tree, the scripts.
ds_image_tar() {
	local b=$prefix/build/ds out=$prefix/images/ovs-cni.tar
	mkdir -p "$b" "$prefix/images"
	local pkgs
	pkgs=$(sed -n 's/.*apt-get install -y --no-install-recommends \([^&\\]*\).*/\1/p' deploy/Dockerfile | tr -s ' ' ',' | sed 's/^,//;s/,$//')
	[ -n "$pkgs" ] || { log "no apt-get install line in deploy/Dockerfile"; return 1; }
	if [ ! -f "$b/base.tar" ] || [ "$(cat "$b/base.pkgs" 2>/dev/null)" != "$pkgs" ]; then
		log "debootstrap bookworm with $pkgs (about a minute)"
		rm -rf "$b/base"
		debootstrap --variant=minbase --include="$pkgs" bookworm "$b/base" http://deb.debian.org/debian >&2
		rm -rf "$b/base/var/lib/apt/lists/"* "$b/base/var/cache/apt/"* "$b/base/usr/share/doc" "$b/base/usr/share/man"
		tar -C "$b/base" --numeric-owner -cf "$b/base.tar" .
		rm -rf "$b/base"
		echo "$pkgs" >"$b/base.pkgs"
	fi
	# The second layer: what the Dockerfile's build stage builds and COPYs,
	# read from the Dockerfile (its lines joined where they end in "\").
	local df pkgs_go bins f dst
	df=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' deploy/Dockerfile)
	pkgs_go=$(echo "$df" | sed -n 's|^RUN .*go build .*-o /out/ \(.*\)$|\1|p')
	bins=$(echo "$df" | sed -n 's|^COPY --from=build \(.*\) /opt/ovsflow/bin/$|\1|p')
	[ -n "$pkgs_go" ] && [ -n "$bins" ] || { log "deploy/Dockerfile: no go build -o /out/ line or COPY --from=build"; return 1; }
	rm -rf "$b/top" "$b/out" && mkdir -p "$b/top/opt/ovsflow/bin" "$b/out"
	# shellcheck disable=SC2086 # a list of packages
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$b/out/" $pkgs_go
	for f in $bins; do cp "$b/out/${f#/out/}" "$b/top/opt/ovsflow/bin/"; done
	while read -r f dst; do
		mkdir -p "$b/top$(dirname "$dst")"
		cp "deploy/$f" "$b/top$dst"
		chmod 0755 "$b/top$dst"
	done < <(echo "$df" | sed -n 's|^COPY deploy/\([^ ]*\) \(/.*\)$|\1 \2|p')
	tar -C "$b/top" --numeric-owner --owner=0 --group=0 --mtime=@946684800 --sort=name -cf "$b/top.tar" .
	oci_tar "$out" "$ds_image" "$(echo "$df" | sed -n 's/^ENTRYPOINT //p')" "$b/base.tar" "$b/top.tar"
}

# oci_tar OUT NAME ENTRYPOINT LAYER...: an OCI image layout tar, as `ctr images import` reads.
oci_tar() {
	local out=$1 name=$2 ep=$3
	shift 3
	local d
	d=$(mktemp -d "$prefix/build/oci.XXXXXX")
	mkdir -p "$d/blobs/sha256"
	local l sum layers="" diffs=""
	for l in "$@"; do
		sum=$(sha256sum "$l" | cut -d' ' -f1)
		cp "$l" "$d/blobs/sha256/$sum"
		layers+="${layers:+,}{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$sum\",\"size\":$(stat -c %s "$l")}"
		diffs+="${diffs:+,}\"sha256:$sum\""
	done
	blob() { # blob CONTENT: stores it, prints "digest size"
		local s
		s=$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)
		printf '%s' "$1" >"$d/blobs/sha256/$s"
		echo "sha256:$s ${#1}"
	}
	local cfg man idx
	read -r cdig csize < <(blob "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":$ep,\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[$diffs]}}")
	read -r mdig msize < <(blob "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"$cdig\",\"size\":$csize},\"layers\":[$layers]}")
	printf '{"imageLayoutVersion":"1.0.0"}' >"$d/oci-layout"
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
		"$mdig" "$msize" "$name" "${name##*:}" >"$d/index.json"
	tar -C "$d" -cf "$out.new" oci-layout index.json blobs
	mv -f "$out.new" "$out"
	rm -rf "$d"
}

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
test) exec test/kube/run.sh ;;
*)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
