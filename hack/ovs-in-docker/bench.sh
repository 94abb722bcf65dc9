# bench.sh: `hack/ovs-in-docker.sh bench -kube`, sourced by hack/ovs-in-docker.sh
# after cluster.sh (its helpers and names). A benchmark, not a test: it
# prints figures and asserts no time.
#
#   up -kube -nodes N, deploy; then for each chain, in one run on the same cluster:
#     ovsflow    the DaemonSet's conflist (ovs-bridge + host-local + ovs-portmap), its agent sampled
#     reference  containernetworking/plugins v1.10.0 (go.mod's version, built from the
#                module proxy): bridge (isGateway, ipMasq, hairpinMode) + host-local +
#                portmap (snat), iptables backend, installed on every node in place
#                of ovsflow's conflist once the DaemonSet's pods are gone (its
#                nodeSelector then matches no node, so no agent writes its conflist back)
#   test/cluster/scale (client-go) scales P Deployments of one hostPort each
#   (port 20000+j for the j-th: a node can hold one pod of each, so the
#   scheduler puts P pods on every node) from 0 to N replicas, until all
#   N*P pods are Ready, checks every hostPort from this host, scales them
#   to 0 until all are gone; the tables of both chains; down.
#
# Pods are IPv6-only unless OID_KPOD4 is set (a node's IPv4 /26 holds 61
# pods); kubelet's maxPods is P+10 when that exceeds 110 (OID_KMAXPODS
# overrides). The runs' JSON and the tables stay in $DATA/bench/; -record
# DIR also writes the tables to DIR/kube-bench-DATE.md (docs/figures: the
# figures docs/performance.md reads).

# bench_build: the driver and the reference plugins, into $1.
bench_build() {
	local d=$1
	mkdir -p "$d/ref"
	(cd test/cluster && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$d/scale" ./scale) || die "building test/cluster/scale"
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$d/ref/" \
		github.com/containernetworking/plugins/plugins/main/bridge \
		github.com/containernetworking/plugins/plugins/meta/portmap \
		github.com/containernetworking/plugins/plugins/ipam/host-local || die "building the reference plugins"
	log "reference plugins: $(go version -m "$d/ref/bridge" | awk '$2 == "github.com/containernetworking/plugins" {print $2, $3}')"
}

# bench_use_reference DIR: the reference plugins of DIR in ovsflow's place on
# every node (the harness tool's `reference`: the DaemonSet taken off the
# nodes, the reference conflist, br0's gateway addresses removed).
bench_use_reference() { oid reference -kubeconfig "$(admin_kubeconfig)" -plugins "$1" || die "the reference chain"; }

# bench_left CHAIN: what of the chain is left on the nodes once every pod is
# gone: its container ports (the tool's `chain-left`), waited for up to 30 s.
bench_left() { oid chain-left "$1"; }

# bench_overlay RECORD [ARGS]: the overlay's benchmark (test/cluster/overlaybench,
# with ARGS): up -kube -nodes 3 -subnets 2, deploy, host-gw against the
# tunnel from one pod, the agent with simulated Nodes; RECORD: also
# DIR/overlay-bench-DATE.md; down.
bench_overlay() {
	local record=$1 t0=$SECONDS out
	shift
	[ "$(id -u)" = 0 ] || die "bench -overlay: needs root (up -kube)"
	out=$DATA/bench/$(date -u +%Y%m%dT%H%M%SZ)
	mkdir -p "$out"
	(cd test/cluster && go build -o "$DATA/bench/overlaybench" ./overlaybench) || die "building test/cluster/overlaybench"
	cmd_up -kube -nodes 3 -subnets 2 >"$out/up.txt" || die "up -kube failed"
	if [ "${OID_KEEP:-}" != 1 ]; then trap 'cmd_down >/dev/null 2>&1 || true' EXIT; fi
	cmd_deploy || die "deploy failed"
	"$DATA/bench/overlaybench" -kubeconfig "$(admin_kubeconfig)" -harness "$0" -out "$out/overlay.md" "$@" || die "the overlay benchmark failed"
	{
		echo
		echo "$(date -u +%FT%TZ), $(nproc) CPUs, datapath $(sed -n 's/^DATAPATH //p' "$out/up.txt"), $(version)"
	} | tee -a "$out/overlay.md"
	if [ -n "$record" ]; then
		mkdir -p "$record" && cp "$out/overlay.md" "$record/overlay-bench-$(date -u +%F).md"
	fi
	echo "bench -overlay: total $((SECONDS - t0)) s (figures in $out)"
}

cmd_bench() {
	local n=3 pods=110 idle=30 kube=0 record= overlay=0 oargs=()
	while (($#)); do
		case $1 in
		-overlay) overlay=1; shift ;;
		-parts | -peers | -window) oargs+=("$1" "$2"); shift 2 ;;
		-kube) kube=1; shift ;;
		-nodes) n=$2; shift 2 ;;
		-pods) pods=$2; shift 2 ;;
		-idle) idle=$2; shift 2 ;;
		-record) record=$2; shift 2 ;;
		*) die "bench: unknown argument $1" ;;
		esac
	done
	((overlay)) && { bench_overlay "$record" "${oargs[@]}"; return; }
	((kube)) || die "bench: -kube or -overlay is required (the benchmarks are of a Kubernetes cluster)"
	[[ $pods =~ ^[0-9]+$ ]] && ((pods >= 1 && pods <= 1000)) || die "bench: -pods $pods: want 1 to 1000"
	[[ $idle =~ ^[0-9]+$ ]] || die "bench: -idle $idle: want seconds"
	# (read by the tool's up -kube: topology.Kube)
	[ -n "${OID_KPOD4:-}" ] || export OID_KPOD4=none
	# No cluster DNS: its pods would be counted with the benchmark's, and
	# the reference chain replaces the network under them.
	export OID_DNS=0
	export OID_KMAXPODS=${OID_KMAXPODS:-$((pods + 10 > 110 ? pods + 10 : 110))}
	[ "$(id -u)" = 0 ] || die "bench: needs root (up -kube; the agent's /proc)"
	local t0=$SECONDS out
	out=$DATA/bench/$(date -u +%Y%m%dT%H%M%SZ)
	mkdir -p "$out"
	bench_build "$DATA/bench"
	cmd_up -kube -nodes "$n" >"$out/up.txt" || die "up -kube failed"
	if [ "${OID_KEEP:-}" != 1 ]; then trap 'cmd_down >/dev/null 2>&1 || true' EXIT; fi
	local tup=$SECONDS
	cmd_deploy || die "deploy failed"
	local tdep=$SECONDS
	# The harness's processes: the containers' cgroups, and the pods' (kubelet's cgroupRoot /$P/NODE).
	local cgroups
	cgroups=$(docker ps -q --no-trunc --filter "label=$LABEL" | sed 's|$|,|' | tr -d '\n')"/$P/"
	local drv=("$DATA/bench/scale" -kubeconfig "$(admin_kubeconfig)" -pods "$pods" -cgroups "$cgroups"
		-containerd-metrics-port 1338) # (the tool's containerdMetricsPort)
	"${drv[@]}" -chain ovsflow -agent ovsflow-agent -idle "${idle}s" -out "$out/ovsflow.json" || die "the ovsflow run failed"
	bench_left ovsflow | tee "$out/left.txt"
	local tone=$SECONDS
	bench_use_reference "$DATA/bench/ref"
	"${drv[@]}" -chain reference -idle 0 -out "$out/reference.json" || die "the reference run failed"
	bench_left reference | tee -a "$out/left.txt"
	{
		echo "## bench -kube -nodes $n -pods $pods -idle $idle: $(date -u +%FT%TZ), $(nproc) CPUs, datapath $(sed -n 's/^DATAPATH //p' "$out/up.txt"), $(version)"
		echo
		grep '^NODE ' "$out/up.txt" | sed 's/^/    /'
		echo
		"$DATA/bench/scale" -report "$out/ovsflow.json" "$out/reference.json"
	} | tee "$out/report.md"
	if [ -n "$record" ]; then
		mkdir -p "$record" && cp "$out/report.md" "$record/kube-bench-$(date -u +%F).md"
	fi
	echo "up -kube: $((tup - t0)) s; deploy: $((tdep - tup)) s; ovsflow: $((tone - tdep)) s; reference: $((SECONDS - tone)) s; total $((SECONDS - t0)) s (figures in $out)"
}
