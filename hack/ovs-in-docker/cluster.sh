# cluster.sh: deploy, test -kube and demo -kube on the Kubernetes cluster of
# `hack/ovs-in-docker.sh up -kube`, sourced by hack/ovs-in-docker.sh (its
# helpers and names). up -kube itself is the harness tool's
# (test/cluster/harness/cli/kubeup.go): hack/lib/kube.sh's cached build
# (mounted read-only into the containers at /opt/ovsflow-kube/bin, so the
# engine must run on this machine), the PKI and the configs, written under
# $KSTATE and mounted read-only at the same path.
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

KSTATE=/run/$P-kube             # PKI, kubeconfigs, each node's configs (the tool's topology.Plan.KubeState)
SVC4=${OID_SVC4:-203.0.113.192/27}           # Service ClusterIPs (the tool's topology.Kube)
admin_kubeconfig() { echo "$KSTATE/pki/admin.kubeconfig"; }

kctl() { "$kube_prefix/bin/kubectl" --kubeconfig "$(admin_kubeconfig)" "$@"; }

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

# deploy_dns: the cluster DNS (deploy/coredns.yaml, the build's CoreDNS;
# the harness tool's dns), at the kube-dns Service's addresses.
deploy_dns() { oid dns -kubeconfig "$(admin_kubeconfig)" -tar "$(kube_coredns_tar)" || die "the cluster DNS"; }

# deploy_multus: Multus in front of ovsflow on every node (the harness tool's multus).
deploy_multus() {
	oid multus -kubeconfig "$(admin_kubeconfig)" -version "$(cat "$KSTATE/multus")" || die "putting Multus in front"
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
