# cluster.sh: the Kubernetes cluster of `hack/ovs-in-docker.sh up -kube`,
# sourced by hack/ovs-in-docker.sh (its helpers and names). The pieces come
# from hack/lib/kube.sh: the cached build (mounted read-only into the
# containers at /opt/ovsflow-kube/bin, so the engine must run on this
# machine), the PKI and the configs, written here under $KSTATE and mounted
# read-only at the same path.
#
# With -subnets 2 (OID_SUBNETS=2) the even nodes are on a second Docker
# network, behind a router container ($P-router), and the control plane on
# both (test/cluster/harness/topology): pods across the two reach each other
# through the node agent's tunnel (its -overlay hybrid).
#
#   container $P-cp   etcd, kube-apiserver (https://CP4:6443), kube-controller-manager
#                     (--allocate-node-cidrs, dual stack), kube-scheduler, and the
#                     routes to the nodes' pod ranges (`ovsflow-agent routes`) (cp-init.sh)
#   container $P-nI   Open vSwitch + node-prep.sh as without -kube, then containerd 2.x
#                     (or, with -runtime crio, CRI-O of hack/install-runtimes.sh),
#                     kubelet, kube-proxy (iptables mode) (node-init.sh with OID_KUBE)
#
# No pod routes are installed by the harness: cross-node pod routes are the
# node agent's (the DaemonSet of deploy/ovsflow-cni.yaml), as on a real cluster;
# the control plane's are the agent's too, in its routes mode (the control-plane
# container is no Node), from the binary of the node image.
#
# With `up -kube -multus` (what `test -kube` does), `deploy` also puts Multus
# in front: deploy/multus.yaml (the NetworkAttachmentDefinition CRD, Multus's
# ServiceAccount and RBAC), and on every node Multus's thin plugin (built by
# hack/lib/kube.sh into the cache), a kubeconfig with a token of that
# ServiceAccount, and examples/multus.conflist as 00-multus.conflist: the
# first conflist by name, so containerd runs Multus, which delegates the
# cluster default network to the agent's 10-ovsflow.conflist.
#
# The cluster DNS: CoreDNS as kubeadm deploys it (deploy/coredns.yaml), its
# binary and image built by hack/lib/kube.sh into the cache; `deploy` imports
# the image into every node and applies the manifest once the pod network is
# up (its pods on the pod network). The kube-dns
# Service has the 10th address of each service range, and every kubelet's
# clusterDNS names both, the pods' first family first.
# OID_DNS=0 (and bench -kube) leaves it out: no CoreDNS pod, no clusterDNS.

# shellcheck source=hack/lib/kube.sh
. hack/lib/kube.sh

KSTATE=/run/$P-kube             # PKI, kubeconfigs, each node's configs
# Kernel-wide sysctls as they were before the first kubelet of any harness
# on this machine (the kernel is shared: two clusters of other prefixes may
# run at once), and the prefixes whose clusters are up (KSYSCTLS.d/P): the
# last one down puts them back. Under a lock (KSYSCTLS.lock).
KSYSCTLS=/run/ovsflow-oid-kube.sysctls
KPOD4=${OID_KPOD4:-$POD4}                    # the cluster CIDR, IPv4: a /26 per node; "none": IPv6-only pods
KPOD6=${OID_KPOD6:-${NET6%::/*}:100::/56}    # the cluster CIDR, IPv6: a /64 per node
KMASK4=${OID_KMASK4:-26} KMASK6=64         # OID_KMASK4: a smaller cluster CIDR for a second harness
KMAXPODS=${OID_KMAXPODS:-}                   # kubelet's maxPods ("": kubelet's default, 110)
KCTRD_METRICS_PORT=1338                      # containerd's metrics, on each node's IPv4 address
# kube_cluster_cidrs: the pod CIDRs of the cluster, IPv4 first (none with OID_KPOD4=none).
kube_cluster_cidrs() { if [ "$KPOD4" = none ]; then echo "$KPOD6"; else echo "$KPOD4,$KPOD6"; fi; }
kube_mask4() { [ "$KPOD4" = none ] || echo "$KMASK4"; }
SVC4=${OID_SVC4:-203.0.113.192/27}           # Service ClusterIPs
SVC6=${OID_SVC6:-${NET6%::/*}:ffff::/112}
cp4() { oid addr net4 30; }
cp6() { echo "${NET6%::/*}::fe"; }
svc4_first() { local n=${SVC4%/*}; echo "${n%.*}.$((${n##*.} + 1))"; }
svc6_first() { echo "${SVC6%::/*}::1"; }
KDNS=${OID_DNS:-1}                            # 0: no cluster DNS (no CoreDNS, no clusterDNS)
dns4() { local n=${SVC4%/*}; echo "${n%.*}.$((${n##*.} + 10))"; }
dns6() { echo "${SVC6%::/*}::a"; }
# kube_cluster_dns: kubelet's clusterDNS, the address of the pods' first family first.
kube_cluster_dns() {
	((KDNS)) || return 0
	if [ "$KPOD4" = none ]; then echo "$(dns6),$(dns4)"; else echo "$(dns4),$(dns6)"; fi
}
kube_server() { echo "https://$(cp4):6443"; }
admin_kubeconfig() { echo "$KSTATE/pki/admin.kubeconfig"; }

kctl() { "$kube_prefix/bin/kubectl" --kubeconfig "$(admin_kubeconfig)" "$@"; }

# kube_prepare N MULTUS RUNTIME: the binaries (built once; Multus's too when
# MULTUS is 1), the PKI and every node's configs, for RUNTIME (containerd or
# crio; a node whose dir holds crio.conf boots CRI-O).
kube_prepare() {
	local n=$1 multus=${2:-0} runtime=${3:-containerd} i me d
	[ "$(id -u)" = 0 ] || die "up -kube: needs root (the cached build, the PKI under $KSTATE)"
	if ((KDNS)); then kube_build_all coredns; else kube_build_all; fi
	((multus)) && kube_build_multus
	rm -rf "$KSTATE"
	mkdir -p "$KSTATE/pki"
	chmod 0755 "$KSTATE"
	# deploy reads it: Multus goes in front of ovsflow.
	((multus)) && echo "$multus_version" >"$KSTATE/multus"
	((KDNS)) && echo "$coredns_version" >"$KSTATE/dns"
	d=$KSTATE/pki
	kube_ca "$d" "$P"
	kube_control_plane_certs "$d" "$P" "DNS:cp,IP:127.0.0.1,IP:$(cp4),IP:$(cp6),IP:$(svc4_first),IP:$(svc6_first)" "$(kube_server)"
	for ((i = 1; i <= n; i++)); do
		me=n$i
		kube_node_cert "$d" "kubelet-$me" "$me" "DNS:$me,IP:$(node4 "$i"),IP:$(node6 "$i")" "$(kube_server)" "$P"
		# containerd's metrics on the node's address: its CRI plugin's timings
		# (sandbox network set-up and teardown: the CNI chain) for bench -kube;
		# the pods' netns files in the node's own /var/run/netns, as on a
		# node with containerd's defaults (test/cluster/harness/kubeconf).
		oid node-configs -dir "$KSTATE/$me" -node "$me" -runtime "$runtime" -pki "$d" -cgroup-root "/$P/$me" \
			-cluster-cidrs "$(kube_cluster_cidrs)" -max-pods "${KMAXPODS:-0}" -cluster-dns "$(kube_cluster_dns)" \
			-containerd "$kube_prefix/bin/containerd" -metrics "$(node4 "$i"):$KCTRD_METRICS_PORT" ||
			die "up -kube: the configs of $me"
	done
	# The containers read the keys as root; nothing else on this machine needs them.
	chmod -R go-rwx "$d"
	# kubelet sets kernel-wide sysctls (the kernel is this machine's): the
	# values from before the first kubelet of any harness, put back by the
	# last down.
	(
		flock 9
		if [ ! -f "$KSYSCTLS" ]; then
			local s
			for s in "${kube_kubelet_sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$KSYSCTLS"
		fi
		mkdir -p "$KSYSCTLS.d" && touch "$KSYSCTLS.d/$P"
	) 9>"$KSYSCTLS.lock"
}

# kube_mounts: the docker run arguments every container of the cluster gets.
kube_mounts() {
	echo -v "$kube_prefix/bin:/opt/ovsflow-kube/bin:ro" -v "$KSTATE:$KSTATE:ro" -e "OID_KUBE=$KSTATE"
}

# kube_control_plane: the control-plane container (on both subnets' networks
# with two), until the API server is ready.
kube_control_plane() {
	# shellcheck disable=SC2046 # kube_mounts is a list of arguments
	docker create --name "$P-cp" --hostname cp --label "$LABEL" \
		--network "$P-net" --ip "$(cp4)" --ip6 "$(cp6)" \
		$(kube_mounts) --tmpfs /run:rw,exec,size=64m --cap-add NET_ADMIN \
		-e OID_CP4="$(cp4)" -e OID_CLUSTER_CIDRS="$(kube_cluster_cidrs)" -e OID_SERVICE_CIDRS="$SVC4,$SVC6" \
		-e OID_MASK4="$(kube_mask4)" -e OID_MASK6=$KMASK6 \
		--entrypoint /usr/local/sbin/cp-init.sh "$(node_image)" 2> >(grep -v 'IPv4 forwarding is disabled' >&2) >/dev/null
	oid connect cp && docker start "$P-cp" >/dev/null || die "the control plane did not start"
	oid kube-wait -kubeconfig "$(admin_kubeconfig)" -container cp -timeout 3m && return 0
	docker exec "$P-cp" tail -n 5 /var/log/oid/etcd.log /var/log/oid/kube-apiserver.log >&2 || true
	die "the API server $(kube_server) did not become ready"
}

# kube_wait_nodes N: every node registered, with its pod CIDRs, and the default
# ServiceAccount there (pods need it).
kube_wait_nodes() {
	oid kube-wait -kubeconfig "$(admin_kubeconfig)" -nodes "$1" -timeout 5m || die "up -kube failed"
}

# kube_up [-nodes N] [-multus] [-runtime containerd|crio] [-subnets 1|2] (up -kube): the
# images, the PKI and configs, the nodes' network, the control plane, N nodes
# (default 3) on the runtime (default containerd), until every Node is
# registered with its pod CIDRs; one line per node and KUBECONFIG=.
kube_up() {
	local n=3 multus=0 runtime=containerd i
	while (($#)); do
		case $1 in
		-nodes) n=$2; shift 2 ;;
		-kube) shift ;;
		-multus) multus=1; shift ;;
		-runtime) runtime=$2; shift 2 ;;
		-subnets) export OID_SUBNETS=$2; shift 2 ;;
		*) die "up: unknown argument $1" ;;
		esac
	done
	((n >= 1 && n <= 4)) || die "up: -nodes $n: want 1 to 4"
	case $runtime in containerd | crio) ;; *) die "up: -runtime $runtime: want containerd or crio" ;; esac
	if [ "$KPOD4" != none ]; then
		# The node IPAM controller gives each Node one range of the cluster
		# CIDR: a Node it has none for never runs a pod.
		local plen=${KPOD4#*/}
		((KMASK4 >= plen && (1 << (KMASK4 - plen)) >= n)) ||
			die "up -kube: -nodes $n: the IPv4 cluster CIDR $KPOD4 (OID_KPOD4, else OID_POD4) holds $((KMASK4 >= plen ? 1 << (KMASK4 - plen) : 0)) range(s) of /$KMASK4 (OID_KMASK4): a larger CIDR, a longer mask or fewer nodes"
	fi
	engine start
	local t0=$SECONDS
	oid images
	oid rm
	kube_prepare "$n" "$multus" "$runtime"
	oid network
	local t1=$SECONDS
	kube_control_plane
	for ((i = 1; i <= n; i++)); do
		# The Node object's pod CIDRs (node IPAM); no routes (the node agent's).
		# IPv6 on in the node's netns ("all": kube-proxy programs no IPv6 rules
		# when it is off there; node-prep.sh turns it off on the uplink again).
		# shellcheck disable=SC2046 # kube_mounts is a list of arguments
		oid run "n$i" "$(node4 "$i")" "$(node6 "$i")" $(kube_mounts) -e OID_NODE_IPS="$(node4 "$i"),$(node6 "$i")" \
			--device /dev/kmsg --sysctl net.ipv6.conf.all.disable_ipv6=0
	done
	# shellcheck disable=SC2046
	oid wait-ready $(seq -f 'n%g' "$n") || die "up failed"
	kube_wait_nodes "$n"
	local dp
	dp=$(oid datapath)
	log "$n nodes up in $((SECONDS - t1)) s ($((SECONDS - t0)) s with the images)$([ "${OID_SUBNETS:-1}" = 1 ] || echo " on ${OID_SUBNETS} subnets"); datapath $dp$([ "$dp" = netdev ] && echo " (no openvswitch kernel module on this host)")"
	echo "DATAPATH $dp"
	for ((i = 1; i <= n; i++)); do kube_node_line "$i"; done
	echo "KUBECONFIG=$(admin_kubeconfig)"
}

# kube_node_line I: NODE <name> <IPv4> <IPv6> <pod CIDRs, as the node IPAM controller gave them>
kube_node_line() {
	echo "NODE n$1 $(node4 "$1") $(node6 "$1") $(kctl get node "n$1" -o jsonpath='{.spec.podCIDRs[*]}')"
}

# ds_tar: the DaemonSet's image tar of this tree (kube_ds_image_tar), under the harness's data dir.
ds_tar() { echo "$DATA/ds/ovs-cni.tar"; }

kube_nodes() { nodes | grep -v '^cp$'; }

cmd_kubectl() {
	[ -f "$(admin_kubeconfig)" ] || die "no cluster (up -kube first)"
	exec "$kube_prefix/bin/kubectl" --kubeconfig "$(admin_kubeconfig)" "$@"
}

# cmd_deploy: the DaemonSet's image into every node's containerd, the manifest applied,
# until the DaemonSet is rolled out and every node is Ready.
cmd_deploy() {
	engine || die "no engine answers (is the harness up?)"
	[ -f "$(admin_kubeconfig)" ] || die "no cluster (up -kube first)"
	local t0=$SECONDS tar n
	tar=$(ds_tar)
	apt_install debootstrap
	kube_ds_image_tar "$DATA/ds/build" "$tar"
	oid import "$tar" || die "importing the DaemonSet's image"
	log "image $(kube_ds_image_name) built and imported into $(kube_nodes | wc -l) nodes in $((SECONDS - t0)) s"
	local redeploy=0
	kctl -n kube-system get daemonset ovsflow-cni >/dev/null 2>&1 && redeploy=1
	oid apply -kubeconfig "$(admin_kubeconfig)" -f deploy/ovsflow-cni.yaml
	# The image's name does not change with the tree: on a redeploy the pod
	# template carries the tar's digest, so that another build rolls the
	# DaemonSet out (and the same build does not). A first deploy's pods
	# start with the image just imported.
	if ((redeploy)); then
		kctl -n kube-system patch daemonset ovsflow-cni --type merge \
			-p "{\"spec\":{\"template\":{\"metadata\":{\"annotations\":{\"ovsflow.io/image-tar-sha256\":\"$(sha256sum "$tar" | cut -c1-32)\"}}}}}" >&2
	fi
	oid rollout -kubeconfig "$(admin_kubeconfig)" -timeout 5m daemonset/kube-system/ovsflow-cni nodes
	[ -f "$KSTATE/dns" ] && deploy_dns
	[ -f "$KSTATE/multus" ] && deploy_multus
	log "deployed in $((SECONDS - t0)) s"
}

# deploy_dns: CoreDNS's image (hack/lib/kube.sh's cached tar) into every
# node's containerd, deploy/coredns.yaml applied with the kube-dns Service's
# addresses, until its pods are Ready.
deploy_dns() {
	local t0=$SECONDS n tar
	tar=$(kube_coredns_tar)
	grep -q "^ *image: $kube_coredns_image\$" deploy/coredns.yaml ||
		die "deploy/coredns.yaml does not run $kube_coredns_image (hack/lib/kube.sh's build)"
	[ -f "$tar" ] || die "no $tar (up -kube builds it)"
	oid import "$tar" || die "importing $kube_coredns_image"
	local replicas=2
	(($(kube_nodes | wc -l) > 1)) || replicas=1
	sed -e "s/@DNS_IP4@/$(dns4)/g" -e "s/@DNS_IP6@/$(dns6)/g" -e "s/@DNS_REPLICAS@/$replicas/g" deploy/coredns.yaml |
		oid apply -kubeconfig "$(admin_kubeconfig)" -f -
	oid rollout -kubeconfig "$(admin_kubeconfig)" deployment/kube-system/coredns
	log "cluster DNS: CoreDNS $coredns_version, Service kube-system/kube-dns at $(dns4) and $(dns6), Ready in $((SECONDS - t0)) s"
}

# deploy_multus: deploy/multus.yaml applied, then on every node Multus's thin
# plugin, its kubeconfig (a token of its ServiceAccount) and
# examples/multus.conflist as the node's first conflist, each written to a
# temporary name and renamed, the conflist last.
deploy_multus() {
	local n token kc
	oid apply -kubeconfig "$(admin_kubeconfig)" -f deploy/multus.yaml
	kctl wait --for condition=established --timeout=60s crd/network-attachment-definitions.k8s.cni.cncf.io >&2
	token=$(kctl -n kube-system create token multus --duration=48h)
	kc=$(
		cat <<-EOF
			apiVersion: v1
			kind: Config
			clusters:
			- name: local
			  cluster: {server: "$(kube_server)", certificate-authority-data: $(base64 -w0 <"$KSTATE/pki/ca.crt")}
			users:
			- name: multus
			  user: {token: "$token"}
			contexts:
			- name: multus-context
			  context: {cluster: local, user: multus}
			current-context: multus-context
		EOF
	)
	for n in $(kube_nodes); do
		docker exec -i "$P-$n" sh -ec '
			d=/etc/cni/net.d
			mkdir -p "$d/multus.d" /opt/cni/bin
			cp /opt/ovsflow-kube/bin/multus /opt/cni/bin/.multus.new && mv -f /opt/cni/bin/.multus.new /opt/cni/bin/multus
			(umask 077 && cat >"$d/multus.d/.multus.kubeconfig.new") && mv -f "$d/multus.d/.multus.kubeconfig.new" "$d/multus.d/multus.kubeconfig"
			printf "%s\n" "$1" >"$d/.00-multus.conflist.new" && mv -f "$d/.00-multus.conflist.new" "$d/00-multus.conflist"
		' sh "$(cat examples/multus.conflist)" <<<"$kc" || die "installing Multus on $n"
	done
	log "Multus $(cat "$KSTATE/multus") in front of ovsflow on $(kube_nodes | wc -l) nodes"
}

# cmd_image TAG: another image of this tree for the DaemonSet, the manifest's
# image name with tag TAG and TAG stamped into the binaries as their version,
# imported into every node's containerd (what an upgrade rolls out); prints
# IMAGE=<name>. The manifest is not touched.
cmd_image() {
	(($# == 1)) && [[ $1 =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "image TAG (a tag of the manifest's image name)"
	engine || die "no engine answers (is the harness up?)"
	[ -f "$(admin_kubeconfig)" ] || die "no cluster (up -kube first)"
	local t0=$SECONDS name tar n
	name=$(kube_ds_image_name)
	name=${name%:*}:$1
	tar=$DATA/ds/ovs-cni-$1.tar
	apt_install debootstrap
	kube_ds_image_tar "$DATA/ds/build" "$tar" "$name" "$1"
	oid import "$tar" || die "importing $name"
	rm -f "$tar"
	log "image $name built and imported into $(kube_nodes | wc -l) nodes in $((SECONDS - t0)) s"
	echo "IMAGE=$name"
}

# kube_down: what up -kube made on this machine besides the containers.
kube_down() {
	rm -rf "$KSTATE"
	(
		flock 9
		rm -f "$KSYSCTLS.d/$P"
		if [ -f "$KSYSCTLS" ] && ! ls -A "$KSYSCTLS.d" 2>/dev/null | grep -q .; then
			local s
			while IFS= read -r s; do sysctl -qw "$s" || true; done <"$KSYSCTLS"
			rm -rf "$KSYSCTLS" "$KSYSCTLS.d"
		fi
	) 9>"$KSYSCTLS.lock"
}

# kube_test N [CONF [RUNTIME]]: up -kube (on RUNTIME, default containerd), deploy, with CONF 1 conformance's default
# selection (Kubernetes' own tests, cmd_conformance), the Go tests of test/cluster (client-go
# against the API server) with ovsflow as the runtime's network; then Multus
# put in front (deploy_multus) and the Multus tests (OVSFLOW_CLUSTER_MULTUS=1:
# they must run, not skip); down; the times of each step. The first part runs
# without Multus because Multus (cniVersion 1.0.0) sends the plugins neither
# STATUS nor GC, which containerd's tests need. OID_RUN: a -run pattern (the
# Multus part runs when it names a Multus test). On CRI-O, the tests of
# kube_crio_run (or OID_RUN's), and no Multus (its tests are containerd's).
# kube_crio_run: the test/cluster tests of what a CRI-O node changes, which
# test -kube -runtime crio runs: its pods' network across nodes and to
# Services, CRI-O's own host ports over it (CRI-O publishes them itself and
# passes the plugins no mappings, so the tests of ovs-portmap's host ports,
# conflicts and metrics are containerd's), STATUS (CRI-O asks it every 5 s
# only with cni_status_grace_period), a pod's DEL and a node's restart
# (CRI-O's own GC at start), the uninstall. The rest of test/cluster holds
# on CRI-O too (all of it ran there but five tests that cannot by design:
# docs/kubernetes.md), at the cost of ten more minutes beside CI's other
# suites.
kube_crio_run='^(TestPodsReachEveryPodAcrossNodes|TestClusterIPServiceFromPodsOnEveryNode|TestHostPortOnEveryNodeFromOtherNodesPodsAndHost|TestHostPortFromPodOnSameNode|TestStatusReadyOnlyOnceBridgeServed|TestPodDeleteLeavesNothingOnNode|TestNodeRestartBringsBackPodsWithHostPorts|TestUninstallLeavesNodeAsPrepared)$'
kube_test() {
	local n=$1 conf=${2:-0} runtime=${3:-containerd} t0=$SECONDS rc=0 run=${OID_RUN:-}
	cmd_up -kube -nodes "$n" -runtime "$runtime" -subnets "${OID_SUBNETS:-1}" >/dev/null || die "up -kube failed"
	[ "$runtime" != crio ] || run=${OID_RUN:-$kube_crio_run}
	local tup=$SECONDS
	if [ "${OID_KEEP:-}" != 1 ]; then trap 'cmd_down >/dev/null 2>&1 || true' EXIT; fi
	cmd_deploy || die "deploy failed"
	local tdep=$SECONDS tconf=
	if ((conf)) && [ -z "${OID_RUN:-}" ]; then
		# Kubernetes' own tests first, on the fresh cluster (test/cluster's
		# delete and re-register Nodes): conformance's default selection, in
		# a process of its own (set -e holds in its builds there).
		"$0" conformance || rc=$?
		tconf="conformance: $((SECONDS - tdep)) s; "
	fi
	local tgo=$SECONDS
	# The overlay's tests need nodes on two subnets (-subnets 2).
	local skip='^TestMultus'
	[ "${OID_SUBNETS:-1}" = 2 ] || skip+='|^TestOverlay'
	cluster_go_test -skip "$skip" ${run:+-run "$run"} || rc=$?
	local tone=$SECONDS
	if [ "$runtime" = containerd ] && { [ -z "${OID_RUN:-}" ] || [[ $OID_RUN == *Multus* ]]; }; then
		kube_build_multus && echo "$multus_version" >"$KSTATE/multus" && deploy_multus || die "putting Multus in front failed"
		OVSFLOW_CLUSTER_MULTUS=1 cluster_go_test -run "${OID_RUN:-^TestMultus}" || rc=$?
	fi
	echo "up -kube -nodes $n -runtime $runtime -subnets ${OID_SUBNETS:-1}: $((tup - t0)) s; deploy: $((tdep - tup)) s; ${tconf}tests: $((tone - tgo)) s; with Multus in front: $((SECONDS - tone)) s; total $((SECONDS - t0)) s"
	return $rc
}

# cluster_go_test ARGS...: test/cluster's Go tests against this cluster.
cluster_go_test() {
	(
		cd test/cluster &&
			OVSFLOW_CLUSTER_KUBECONFIG=$(admin_kubeconfig) OVSFLOW_CLUSTER_HARNESS=$PWD/../../hack/ovs-in-docker.sh OVSFLOW_CLUSTER_SUBNETS=${OID_SUBNETS:-1} \
				go test -count=1 -v -timeout 30m "$@" .
	)
}

# kube_demo N: up -kube, deploy, a DaemonSet of the test app publishing host port
# 8080 (TCP) on every node, reached from this host and from the other nodes, down.
kube_demo() {
	local n=$1 i j a
	echo "# A Kubernetes cluster in Docker: a control-plane container and $n nodes (OVS, containerd 2.x, kubelet, kube-proxy)."
	cmd_up -kube -nodes "$n" || die "up -kube failed"
	trap 'echo "# Removing everything."; cmd_down' EXIT
	echo
	echo "# The DaemonSet of deploy/ovsflow-cni.yaml, with the image of this tree:"
	cmd_deploy 2>&1 | grep -E 'deployed|rolled out|image' | sed 's/^/  /'
	step "$0" kubectl get nodes -o 'custom-columns=NODE:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,IP:.status.addresses[*].address,POD-CIDRS:.spec.podCIDRs'
	echo
	echo "# A DaemonSet of the test app, container port 80 published on host port 8080 of every node:"
	kctl apply -f - >/dev/null <<-YAML
		apiVersion: apps/v1
		kind: DaemonSet
		metadata: {name: web, namespace: default}
		spec:
		  selector: {matchLabels: {app: web}}
		  template:
		    metadata: {labels: {app: web}}
		    spec:
		      dnsPolicy: Default
		      terminationGracePeriodSeconds: 1
		      containers:
		      - name: web
		        image: rt.local/ovsflow-app:1
		        imagePullPolicy: Never
		        ports: [{containerPort: 80, hostPort: 8080}]
		        readinessProbe: {tcpSocket: {port: 80}, periodSeconds: 1}
	YAML
	kctl rollout status daemonset/web --timeout=120s >/dev/null
	step "$0" kubectl get pods -l app=web -o wide
	echo
	echo "# This host reaches each node's host port (the pod sees this host's address):"
	for ((i = 1; i <= n; i++)); do
		for a in "$(node4 "$i")" "$(node6 "$i")"; do
			step timeout 5 bash -c "exec 3<>/dev/tcp/$a/8080 && head -1 <&3"
		done
	done
	echo
	echo "# Each node reaches the next node's host port (the pod sees the calling node's address):"
	for ((i = 1; i <= n; i++)); do
		j=$((i % n + 1))
		step "$0" exec "n$i" timeout 5 bash -c "exec 3<>/dev/tcp/$(node4 "$j")/8080 && head -1 <&3"
	done
	echo
	echo "# The flows ovs-portmap wrote on n1 for its pod's host port:"
	step "$0" exec n1 sh -c "ovs-ofctl dump-flows br0 --no-stats | grep 'tp_dst=8080' | cut -c1-150"
}

# cmd_stats [SECONDS]: CPU (cores, averaged over SECONDS, default 30) and memory
# (RSS) of each container of the harness and of each node's pods (kubelet's
# cgroupRoot, /$P/NODE, outside the container's cgroup), from the cgroups.
cmd_stats() {
	local secs=${1:-30} c id name
	engine || die "no engine answers (is the harness up?)"
	local -A cg
	for c in $(nodes); do
		id=$(docker inspect -f '{{.Id}}' "$P-$c")
		cg[$c]=$(docker inspect -f '{{.HostConfig.CgroupParent}}' "$P-$c")
		cg[$c]=${cg[$c]:-/docker}/$id
		[ -d "/sys/fs/cgroup/cpuacct/$P/$c" ] && cg["$c pods"]=/$P/$c
	done
	local -A u0
	for name in "${!cg[@]}"; do u0[$name]=$(cat "/sys/fs/cgroup/cpuacct${cg[$name]}/cpuacct.usage"); done
	local t0
	t0=$(date +%s%N)
	sleep "$secs"
	local dt=$(($(date +%s%N) - t0)) tot_cpu=0 tot_rss=0 u rss
	printf '%-10s %8s %9s\n' WHAT CPU RSS_MiB
	while IFS= read -r name; do
		u=$(($(cat "/sys/fs/cgroup/cpuacct${cg[$name]}/cpuacct.usage") - u0[$name]))
		rss=$(awk '$1 == "total_rss" {print $2}' "/sys/fs/cgroup/memory${cg[$name]}/memory.stat")
		tot_cpu=$((tot_cpu + u))
		tot_rss=$((tot_rss + rss))
		printf '%-10s %8s %9s\n' "$name" "$(awk -v u="$u" -v d="$dt" 'BEGIN {printf "%.3f", u / d}')" $((rss >> 20))
	done < <(printf '%s\n' "${!cg[@]}" | sort)
	printf '%-10s %8s %9s\n' total "$(awk -v u="$tot_cpu" -v d="$dt" 'BEGIN {printf "%.3f", u / d}')" $((tot_rss >> 20))
}
