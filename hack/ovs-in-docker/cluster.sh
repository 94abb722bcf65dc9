# cluster.sh: kubectl and demo -kube on the Kubernetes cluster of
# `hack/ovs-in-docker.sh up -kube`, sourced by hack/ovs-in-docker.sh (its
# helpers and names). up -kube, deploy, test -kube, conformance and bench
# are the harness tool's (test/cluster/harness/cli): up -kube runs its cached build (kubebuild)
# (mounted read-only into the containers at /opt/ovsflow-kube/bin, so the
# engine must run on this machine), the PKI and the configs, written under
# /run/$P-kube and mounted read-only at the same path.
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
# ServiceAccount and RBAC), and on every node Multus's thin plugin (of the cached
# build), a kubeconfig with a token of that
# ServiceAccount, and examples/multus.conflist as 00-multus.conflist: the
# first conflist by name, so containerd runs Multus, which delegates the
# cluster default network to the agent's 10-ovsflow.conflist.
#
# The cluster DNS: CoreDNS as kubeadm deploys it (deploy/coredns.yaml), its
# binary and image of the cached build; `deploy` imports
# the image into every node and applies the manifest once the pod network is
# up (its pods on the pod network). The kube-dns
# Service has the 10th address of each service range, and every kubelet's
# clusterDNS names both, the pods' first family first.
# OID_DNS=0 (and bench -kube) leaves it out: no CoreDNS pod, no clusterDNS.

kctl() { oid kubectl "$@"; }

# cmd_deploy: the tool's deploy (the DaemonSet's image of this tree into
# every node, the manifest applied, until rolled out and every node Ready;
# then the cluster DNS and Multus where up -kube asked for them).
cmd_deploy() { oid deploy; }

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
