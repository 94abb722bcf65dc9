# kube.sh: sourced by hack/ovs-in-docker.sh (-kube: a control-plane
# container and node containers) and by its cp-init.sh in the image. What
# they share: the cached build of the binaries, the PKI (through the
# harness's tool), the control plane's command lines and the DaemonSet's
# image tar; the nodes' configs are the tool's (test/cluster/harness/kubeconf).
# Every function reports through the caller's log function; none starts a
# process.
#
# Binaries and images are cached under $kube_prefix (OVSFLOW_KUBE_PREFIX,
# default /opt/ovsflow-kube; the Go build cache is Go's own).

kube_prefix=${OVSFLOW_KUBE_PREFIX:-/opt/ovsflow-kube}
kube_version=v1.37.2 # k8s.io/kubernetes; its staging modules are v0.37.2
etcd_version=v3.6.16 # go.etcd.io/etcd/server/v3
containerd_version=v2.4.2
multus_module=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
multus_version=v4.2.3 # the thin plugin (cmd/multus) of `up -kube -multus`
# github.com/coredns/coredns: the cluster DNS of `up -kube`, built from
# hack/coredns (the plugins the cluster's Corefile uses), whose go.mod pins it
# (not in the node image, which sources this file too and builds nothing).
kube_coredns_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../coredns" 2>/dev/null && pwd || true)
kube_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." 2>/dev/null && pwd || true) # (in the node image: none, and no image is made there)
coredns_version=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$kube_coredns_dir/go.mod" 2>/dev/null || true)
# Its image, under upstream's name, so that deploy/coredns.yaml reads as kubeadm's.
kube_coredns_image=registry.k8s.io/coredns/coredns:$coredns_version
kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)
# The pause image of the runtime suites (hack/install-runtimes.sh builds its tar).
kube_pause_image=rt.local/ovsflow-pause:1
# agnhost, the e2e suite's test server: the version its image name carries (test/images/agnhost/VERSION).
kube_agnhost_version=2.66.1

# ---- the build ----------------------------------------------------------------

# kube_built BIN MODULE VERSION: BIN exists and was built from MODULE at VERSION.
kube_built() {
	[ -x "$1" ] && go version -m "$1" 2>/dev/null |
		grep -Eq "^[[:space:]]+(dep|mod)[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)"
}

# kube_scratch_module DIR NAME: an empty module to build other modules' commands in
# (their go.mod files carry replace directives, so `go install pkg@v` refuses).
kube_scratch_module() {
	mkdir -p "$1"
	printf 'module %s\n\ngo 1.25\n' "$2" >"$1/go.mod"
	rm -f "$1/go.sum" "$1/tools.go"
}

# kube_module DIR NAME: a scratch module that requires k8s.io/kubernetes at
# $kube_version, with its staging modules replaced by their released versions.
kube_module() {
	local m=$1
	kube_scratch_module "$m" "$2"
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
	)
}

kube_build_kube() {
	local prefix=$kube_prefix need=0 c
	for c in "${kube_cmds[@]}"; do kube_built "$prefix/bin/$c" k8s.io/kubernetes "$kube_version" || need=1; done
	# The version Kubernetes' own build stamps in (a Node reports its kubelet's).
	[ "$("$prefix/bin/kubelet" --version 2>/dev/null)" = "Kubernetes $kube_version" ] || need=1
	((need)) || return 0
	local m=$prefix/src/kube
	kube_module "$m" ovsflow.local/kube-build
	(
		cd "$m"
		local pkgs=()
		for c in "${kube_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
		log "building Kubernetes $kube_version (${kube_cmds[*]}); about 9 minutes cold on 2 cores"
		# go get resolves what these packages import (go mod tidy would also
		# fetch every test dependency of Kubernetes).
		go get "${pkgs[@]}" >&2
		CGO_ENABLED=0 go build -trimpath -ldflags "$(kube_ldflags)" -o "$prefix/bin/" "${pkgs[@]}"
	)
}

# kube_ldflags: the version Kubernetes' own build stamps in.
kube_ldflags() {
	local minor=${kube_version#v1.} x ldflags="-s -w"
	for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $x.gitVersion=$kube_version -X $x.gitMajor=1 -X $x.gitMinor=${minor%%.*} -X $x.gitTreeState=clean"
	done
	echo "$ldflags"
}

# kube_build_e2e: Kubernetes' end-to-end suite (e2e.test, the binary a
# conformance run executes) and its universal test server (agnhost), each
# unless cached. In a scratch module of their own: the suite's packages are
# imported by its test files only (go get -t), and they need modules that
# the commands do not (ginkgo, gomega, testify, sample-apiserver).
kube_build_e2e() {
	local prefix=$kube_prefix t0=$SECONDS
	mkdir -p "$prefix/bin"
	kube_built "$prefix/bin/e2e.test" k8s.io/kubernetes "$kube_version" &&
		kube_built "$prefix/bin/agnhost" k8s.io/kubernetes "$kube_version" && return 0
	local m=$prefix/src/e2e
	kube_module "$m" ovsflow.local/e2e-build || return 1
	# Each step's failure is the function's (its caller may test it with
	# ||, which turns set -e off in here).
	(
		cd "$m" &&
			log "building Kubernetes' e2e.test and agnhost $kube_version" &&
			go get -t k8s.io/kubernetes/test/e2e k8s.io/kubernetes/test/images/agnhost >&2 &&
			CGO_ENABLED=0 go test -c -vet=off -trimpath -ldflags "$(kube_ldflags)" -o "$prefix/bin/e2e.test" k8s.io/kubernetes/test/e2e &&
			CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=$kube_agnhost_version" -o "$prefix/bin/agnhost" k8s.io/kubernetes/test/images/agnhost
	) || return 1
	log "e2e.test and agnhost built in $((SECONDS - t0)) s"
}

# kube_build_ginkgo: the Ginkgo command of the version e2e.test was built
# with (it runs the suite in parallel processes), unless cached.
kube_build_ginkgo() {
	local m=$kube_prefix/src/e2e v
	v=$(cd "$m" && go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2) && [ -n "$v" ] || return 1
	kube_built "$kube_prefix/bin/ginkgo" github.com/onsi/ginkgo/v2 "$v" && return 0
	(
		cd "$m" &&
			go get "github.com/onsi/ginkgo/v2/ginkgo@$v" >&2 &&
			CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$kube_prefix/bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
	) || return 1
	log "ginkgo $v built"
}

kube_build_etcd() {
	local prefix=$kube_prefix
	kube_built "$prefix/bin/etcd" go.etcd.io/etcd/server/v3 "$etcd_version" && return 0
	local m=$prefix/src/etcd
	kube_scratch_module "$m" ovsflow.local/etcd-build
	(
		cd "$m"
		go get "go.etcd.io/etcd/server/v3@$etcd_version" >&2
		log "building etcd $etcd_version"
		CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$prefix/bin/etcd" go.etcd.io/etcd/server/v3
	)
}

kube_build_containerd() {
	local prefix=$kube_prefix c need=0
	for c in containerd containerd-shim-runc-v2 ctr; do
		kube_built "$prefix/bin/$c" github.com/containerd/containerd/v2 "$containerd_version" || need=1
	done
	((need)) || return 0
	log "building containerd $containerd_version"
	GOBIN=$prefix/bin CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' \
		"github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version" \
		"github.com/containerd/containerd/v2/cmd/ctr@$containerd_version"
}

# kube_build_multus: Multus's thin plugin into the cache, unless there. Built in
# a scratch module (`go install pkg@v` would ask the proxy for the module's
# version list, which it does not serve).
kube_build_multus() {
	local prefix=$kube_prefix
	mkdir -p "$prefix/bin"
	(
		flock 8
		kube_built "$prefix/bin/multus" "$multus_module" "$multus_version" && exit 0
		local m=$prefix/src/multus
		kube_scratch_module "$m" ovsflow.local/multus-build
		cd "$m"
		go get "$multus_module/cmd/multus@$multus_version" >&2
		log "building Multus $multus_version (the thin plugin)"
		CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$prefix/bin/multus" "$multus_module/cmd/multus"
	) 8>"$prefix/.lock"
}

# kube_coredns_tar: CoreDNS's image tar (one layer: the static binary).
kube_coredns_tar() { echo "$kube_prefix/images/coredns-$coredns_version.tar"; }

# kube_build_coredns: CoreDNS as hack/coredns links it (the plugins of
# deploy/coredns.yaml's and kubeadm's Corefiles: 312 s of CPU cold,
# against 536 for the released default set) and its image tar, each unless
# cached. Built in hack/coredns, a module of its own (its go.mod and go.sum
# pin every dependency); the build writes nothing there.
kube_build_coredns() {
	local prefix=$kube_prefix t0=$SECONDS tar
	tar=$(kube_coredns_tar)
	mkdir -p "$prefix/bin" "$prefix/images"
	if ! kube_built "$prefix/bin/coredns" github.com/coredns/coredns "$coredns_version" ||
		! go version -m "$prefix/bin/coredns" | grep -q "ovsflow.local/coredns"; then
		log "building CoreDNS $coredns_version (hack/coredns: its plugins of the cluster's Corefile)"
		(cd "$kube_coredns_dir" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$prefix/bin/coredns" .) || return 1
		log "CoreDNS $coredns_version built in $((SECONDS - t0)) s"
		rm -f "$tar"
	fi
	[ -f "$tar" ] && return 0
	local b=$prefix/build/coredns
	rm -rf "$b" && mkdir -p "$b/top"
	cp "$prefix/bin/coredns" "$b/top/coredns"
	tar -C "$b/top" --numeric-owner --owner=0 --group=0 --mtime=@946684800 --sort=name -cf "$b/top.tar" .
	kube_oci_tar "$tar" "$kube_coredns_image" '["/coredns"]' "$b/top.tar"
	rm -rf "$b"
}

# kube_build_all [coredns]: containerd, etcd and Kubernetes (and CoreDNS), each
# unless cached (under a lock: several scripts share the cache).
kube_build_all() {
	mkdir -p "$kube_prefix/bin"
	(
		flock 8
		kube_build_containerd
		kube_build_etcd
		kube_build_kube
		if [ "${1:-}" = coredns ]; then kube_build_coredns; fi
	) 8>"$kube_prefix/.lock"
}

# ---- configs ----------------------------------------------------------------

# The nodes' configs (kubelet, kube-proxy, containerd, CRI-O) are the
# harness tool's: test/cluster/harness/kubeconf (`oid node-configs`).

# ---- the control plane's command lines ------------------------------------------
# Each sets the array kube_cmd; the caller runs it where it wants.

# kube_etcd_cmd BIN DATA NAME: etcd on 127.0.0.1 only.
kube_etcd_cmd() {
	kube_cmd=("$1" --data-dir "$2" --name "$3"
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380
		--initial-cluster "$3=http://127.0.0.1:2380" --listen-metrics-urls http://127.0.0.1:2381)
}

# kube_apiserver_cmd BIN PKI ADVERTISE SERVICE_CIDRS
kube_apiserver_cmd() {
	local p=$2
	kube_cmd=("$1" --etcd-servers http://127.0.0.1:2379
		--advertise-address "$3" --bind-address 0.0.0.0 --secure-port 6443
		--service-cluster-ip-range "$4"
		--client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key"
		--kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key"
		--kubelet-certificate-authority "$p/ca.crt" --kubelet-preferred-address-types InternalIP
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key"
		--service-account-issuer https://kubernetes.default.svc.cluster.local
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction
		--allow-privileged=false --profiling=false)
}

# kube_controller_manager_cmd BIN PKI CLUSTER_CIDRS SERVICE_CIDRS MASK4 MASK6: with the
# node IPAM controller (--allocate-node-cidrs: each Node gets a spec.podCIDRs
# of each family of CLUSTER_CIDRS) and the ServiceAccount token controller.
# An empty MASK4 is for an IPv6-only CLUSTER_CIDRS (the controller manager
# refuses an IPv4 mask size there).
kube_controller_manager_cmd() {
	local p=$2
	kube_cmd=("$1" --kubeconfig "$p/controller-manager.kubeconfig"
		--authentication-kubeconfig "$p/controller-manager.kubeconfig"
		--authorization-kubeconfig "$p/controller-manager.kubeconfig"
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt"
		--allocate-node-cidrs --cluster-cidr "$3"
		${5:+--node-cidr-mask-size-ipv4 "$5"} --node-cidr-mask-size-ipv6 "$6"
		--service-cluster-ip-range "$4" --profiling=false)
}

# kube_scheduler_cmd BIN PKI
kube_scheduler_cmd() {
	kube_cmd=("$1" --kubeconfig "$2/scheduler.kubeconfig"
		--authentication-kubeconfig "$2/scheduler.kubeconfig" --authorization-kubeconfig "$2/scheduler.kubeconfig"
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false)
}

# kube_oci_tar OUT NAME ENTRYPOINT LAYER...: an OCI image layout tar, as `ctr images import` reads
# (test/runtimes/tools/ocitar, built into a temporary dir).
kube_oci_tar() {
	local out=$1 name=$2 ep=$3 l args=() d rc=0
	shift 3
	for l; do args+=(-layer "$l"); done
	d=$(mktemp -d)
	(cd "$kube_repo" && CGO_ENABLED=0 go build -o "$d/ocitar" ./test/runtimes/tools/ocitar) &&
		"$d/ocitar" -o "$out" -name "$name" -entrypoint "$ep" \
			-env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${args[@]}" || rc=1
	rm -rf "$d"
	return $rc
}
