# conformance.sh: sourced by hack/ovs-in-docker.sh. `conformance`: Kubernetes'
# own end-to-end suite (e2e.test of k8s.io/kubernetes at hack/lib/kube.sh's
# version) against the harness's cluster.
#
# What it needs, built here and cached under $kube_prefix (no registry is
# reachable): e2e.test and agnhost (kube_build_e2e), and the images the
# selected tests run, under the names the suite asks for
# (test/utils/image/manifest.go), imported into every node:
#   agnhost            a debootstrap'ed bookworm with the tools the tests run in it (curl,
#                      wget, OpenBSD nc, dig, ip, socat, iperf: upstream's alpine image has
#                      them, wget as busybox's), /agnhost, entrypoint /agnhost, command pause
#   glibc-dns-testing  the same image under its name (a glibc with dig and getent)
#   busybox            Debian's static busybox and its applets, command sh
#   regression-issue-74839  its server, built from the same module
#   pause              the harness's pause under the suite's name
# e2e.test runs here against the cluster: --provider=skeleton (no cloud, no
# ssh to nodes), exec through the API server with the cached kubectl, its
# JUnit file and log kept under $DATA/conformance/<time>.

conf_default_focus='\[sig-network\] (HostPort |Networking Granular Checks: Pods |Conntrack |DNS should provide DNS for the cluster )'
conf_default_skip='SCTP|\[Disruptive\]|\[Serial\]'
# -selection network: every [sig-network] [Conformance] test, the HostPort,
# Networking Granular Checks (pods and Services), Conntrack, NoSNAT, dual
# stack ([Feature:IPv6DualStack]) and Services tests; without SCTP (the
# nodes share the host's kernel), [Disruptive] and [Serial] (they stop
# nodes or need the cluster alone), and the features the harness has not
# (LoadBalancer: no cloud; NetworkPolicy: the plugins implement none;
# Internet access, Networking-IPv4/IPv6, from a cluster with no route out).
conf_network_focus='\[sig-network\] (.*\[Conformance\]|HostPort |Networking Granular Checks|Conntrack |NoSNAT |\[Feature:IPv6DualStack\]|Services )'
conf_network_skip='SCTP|\[Disruptive\]|\[Serial\]|\[Feature:(LoadBalancer|NetworkPolicy|Networking-IPv4|Networking-IPv6|Networking-DNS)\]'

# conf_images_build DIR: the image tars in DIR (each unless there).
conf_images_build() {
	local b=$1 reg=registry.k8s.io/e2e-test-images
	mkdir -p "$b"
	local pkgs=curl,wget,netcat-openbsd,dnsutils,iproute2,ca-certificates,procps,socat,iperf,nginx-light
	if [ ! -f "$b/base.tar" ] || [ "$(cat "$b/base.pkgs" 2>/dev/null)" != "$pkgs" ]; then
		log "conformance: debootstrap bookworm with $pkgs (about a minute)"
		rm -rf "$b/base"
		apt_install debootstrap
		debootstrap --variant=minbase --include="$pkgs" bookworm "$b/base" http://deb.debian.org/debian >&2
		rm -rf "$b/base/var/lib/apt/lists/"* "$b/base/var/cache/apt/"* "$b/base/usr/share/doc" "$b/base/usr/share/man"
		tar -C "$b/base" --numeric-owner -cf "$b/base.tar" .
		rm -rf "$b/base"
		echo "$pkgs" >"$b/base.pkgs"
		rm -f "$b"/*.oci.tar
	fi
	if [ ! -f "$b/agnhost.oci.tar" ] || [ "$kube_prefix/bin/agnhost" -nt "$b/agnhost.oci.tar" ]; then
		rm -rf "$b/top" && mkdir -p "$b/top/uploads"
		cp "$kube_prefix/bin/agnhost" "$b/top/agnhost"
		# test-webserver's and porter's TLS files, as upstream's image has them.
		openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=localhost \
			-keyout "$b/top/localhost.key" -out "$b/top/localhost.crt" 2>/dev/null
		tar -C "$b/top" --numeric-owner --owner=0 --group=0 --mtime=@946684800 --sort=name -cf "$b/agnhost-top.tar" .
		kube_oci_cmd='["pause"]' kube_oci_tar "$b/agnhost.oci.tar" "$reg/agnhost:$kube_agnhost_version" '["/agnhost"]' "$b/base.tar" "$b/agnhost-top.tar"
		kube_oci_tar "$b/glibc-dns-testing.oci.tar" "$reg/glibc-dns-testing:2.1.1" '[]' "$b/base.tar"
		# The endpoint tests' pods: Debian's nginx in the foreground, on port 80.
		kube_oci_tar "$b/nginx.oci.tar" "$reg/nginx:1.27.0-2" '["nginx", "-g", "daemon off;"]' "$b/base.tar"
	fi
	if [ ! -f "$b/busybox.oci.tar" ]; then
		apt_install busybox-static
		rm -rf "$b/bb" && mkdir -p "$b/bb/bin" "$b/bb/tmp" "$b/bb/etc"
		cp /bin/busybox "$b/bb/bin/busybox"
		local a
		for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$b/bb/bin/$a"; done
		tar -C "$b/bb" --numeric-owner --owner=0 --group=0 --mtime=@946684800 --sort=name -cf "$b/bb.tar" .
		kube_oci_cmd='["sh"]' kube_oci_tar "$b/busybox.oci.tar" "$reg/busybox:1.37.0-2" '[]' "$b/bb.tar"
	fi
	if [ ! -f "$b/regression.oci.tar" ]; then
		rm -rf "$b/reg" && mkdir -p "$b/reg"
		(cd "$kube_prefix/src/e2e" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$b/reg/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839)
		tar -C "$b/reg" --numeric-owner --owner=0 --group=0 --mtime=@946684800 --sort=name -cf "$b/reg.tar" .
		kube_oci_tar "$b/regression.oci.tar" "$reg/regression-issue-74839:1.5" '["/regression-issue-74839"]' "$b/reg.tar"
	fi
}

# conf_build: e2e.test, agnhost and the images, each unless cached; under
# the Kubernetes build's lock, then the images' own (a build running in the
# background, as CI's, is waited for).
conf_build() {
	local b=$kube_prefix/build/conformance
	mkdir -p "$b"
	(
		flock 8 && kube_build_e2e && kube_build_ginkgo
	) 8>"$kube_prefix/.lock" || die "conformance: building e2e.test failed"
	exec 9>"$b/.lock"
	flock 9
	# set -e does not hold inside a function called with ||: run it on its own.
	conf_images_build "$b"
	exec 9>&-
}

# cmd_conformance [-selection default|network] [-focus RE] [-skip RE]
# [-chain ovsflow|reference|both] [-procs P] [-nodes N] [-build]: the
# suite's tests whose names match -focus and not -skip (default: the
# selection's) against the cluster (brought up with N nodes, default 3, and
# deployed when none is up; left up), on the chain asked: reference replaces
# ovsflow's conflist on every node by the reference plugins' (conf_chain); a
# cluster on the reference chain is not switched back (down first); both:
# ovsflow, then reference on the same cluster, then the table of both
# (test/cluster/conformance). -procs: that many Ginkgo processes (default
# 1). -build: only build what a run needs (CI builds it beside other stages).
cmd_conformance() {
	local sel=default focus="" skip="" n=3 build=0 chain=ovsflow procs=1
	while (($#)); do
		case $1 in
		-selection) sel=$2; shift 2 ;;
		-focus) focus=$2; shift 2 ;;
		-skip) skip=$2; shift 2 ;;
		-chain) chain=$2; shift 2 ;;
		-procs) procs=$2; shift 2 ;;
		-nodes) n=$2; shift 2 ;;
		-build) build=1; shift ;;
		*) die "conformance: unknown argument $1" ;;
		esac
	done
	case $sel in
	default) focus=${focus:-$conf_default_focus} skip=${skip:-$conf_default_skip} ;;
	network) focus=${focus:-$conf_network_focus} skip=${skip:-$conf_network_skip} ;;
	*) die "conformance: -selection $sel: want default or network" ;;
	esac
	case $chain in ovsflow | reference | both) ;; *) die "conformance: -chain $chain: want ovsflow, reference or both" ;; esac
	[[ $procs =~ ^[1-9][0-9]?$ ]] || die "conformance: -procs $procs: want 1 to 99"
	# The Service tests make hundreds of Services (the latency test alone
	# 200): the default IPv4 Service range (a /27 of a documentation range)
	# runs out, and they fail with "range is full".
	[ "$sel" != network ] || ((${SVC4#*/} <= 24)) ||
		die "conformance: -selection network: the IPv4 Service range $SVC4 is too small (a /24 at least: OID_SVC4, e.g. 198.19.0.0/16 of the benchmark range, with up -kube)"
	[ "$(id -u)" = 0 ] || die "conformance: needs root (the harness)"
	local t0=$SECONDS
	conf_build
	if ((build)); then
		log "conformance: e2e.test, agnhost and the images built ($((SECONDS - t0)) s)"
		return 0
	fi
	if ! { engine && [ -f "$(admin_kubeconfig)" ] && kctl get nodes >/dev/null 2>&1; }; then
		cmd_up -kube -nodes "$n" >&2 || die "conformance: up -kube failed"
		cmd_deploy || die "conformance: deploy failed"
	fi
	local tar
	for tar in "$kube_prefix"/build/conformance/*.oci.tar; do
		oid import "$tar" || die "conformance: importing $tar"
	done
	oid tag "$kube_pause_image" registry.k8s.io/pause:3.10.2 || die "conformance: tagging the pause image"
	local out rc=0 c reader
	out=$DATA/conformance/$(date -u +%Y%m%dT%H%M%SZ)
	reader=$out/read # conf_run's too
	mkdir -p "$out"
	(cd test/cluster && CGO_ENABLED=0 go build -o "$reader" ./conformance) || die "conformance: building test/cluster/conformance"
	if [ "$chain" = both ]; then
		for c in ovsflow reference; do
			conf_run "$c" "$out/$c" || rc=1
		done
		"$reader" table ovsflow="$out/ovsflow/junit_01.xml" reference="$out/reference/junit_01.xml" >"$out/table.md" ||
			die "conformance: the table"
		log "conformance: the table of both chains: $out/table.md"
	else
		conf_run "$chain" "$out" || rc=1
	fi
	log "conformance: took $((SECONDS - t0)) s"
	return $rc
}

# conf_run CHAIN DIR: the selection (cmd_conformance's focus, skip, procs
# and reader of JUnit files) on CHAIN; e2e.test's log and JUnit file in DIR;
# Ginkgo's summary, the failures and the run's skips with their reason, then
# one line:
# CONFORMANCE chain=C passed=P failed=F skipped=S took=T junit=FILE log=FILE.
conf_run() {
	local chain=$1 out=$2 t0=$SECONDS rc=0
	mkdir -p "$out"
	conf_chain "$chain"
	log "conformance: e2e.test $kube_version on the $chain chain, focus '$focus', skip '$skip', $procs process(es); log and JUnit in $out"
	# --num-nodes: the suite detects it on its first process only; the
	# others (-procs) skip every test that needs 2 nodes ("not -1").
	local args=(--kubeconfig "$(admin_kubeconfig)" --provider=skeleton --num-nodes "$(kube_nodes | wc -l)"
		--kubectl-path "$kube_prefix/bin/kubectl" --report-dir "$out" --disable-log-dump)
	if ((procs == 1)); then
		"$kube_prefix/bin/e2e.test" "${args[@]}" --ginkgo.focus "$focus" --ginkgo.skip "$skip" \
			--ginkgo.no-color --ginkgo.timeout 2h >"$out/e2e.log" 2>&1 || rc=$?
	else
		"$kube_prefix/bin/ginkgo" --procs "$procs" --focus "$focus" --skip "$skip" --no-color --timeout 2h \
			"$kube_prefix/bin/e2e.test" -- "${args[@]}" >"$out/e2e.log" 2>&1 || rc=$?
	fi
	# Ginkgo's summary: "Ran R of T Specs ...", then "SUCCESS!|FAIL! -- P Passed | F Failed | ...".
	grep -E '^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!)' "$out/e2e.log" >&2 || tail -20 "$out/e2e.log" >&2
	local junit=$out/junit_01.xml counts="passed=0 failed=0 skipped=0"
	if [ -f "$junit" ]; then
		"$reader" report "$junit" >"$out/report.txt" 2>&1 || true
		sed '$d' "$out/report.txt" >&2
		counts=$(tail -1 "$out/report.txt")
	fi
	echo "CONFORMANCE chain=$chain $counts took=$((SECONDS - t0))s junit=$junit log=$out/e2e.log"
	return $rc
}

# conf_chain CHAIN: the cluster on CHAIN's plugins. ovsflow: as deployed
# (a cluster switched to the reference chain is refused); reference: the
# reference plugins in ovsflow's place (bench_use_reference), then the
# cluster DNS's pods recreated on them, until Ready.
conf_chain() {
	local first on=ovsflow
	first=$(kube_nodes | head -1)
	docker exec "$P-$first" test -e /etc/cni/net.d/10-reference.conflist && on=reference
	[ "$on" = "$1" ] && return 0
	[ "$1" = reference ] || die "conformance: the cluster runs the reference chain: hack/ovs-in-docker.sh down, then -chain ovsflow"
	bench_build "$DATA/bench"
	bench_use_reference "$DATA/bench/ref"
	if [ -f "$KSTATE/dns" ]; then
		kctl -n kube-system delete pods -l k8s-app=kube-dns --timeout=120s >&2 &&
			kctl -n kube-system wait pods -l k8s-app=kube-dns --for=condition=Ready --timeout=180s >&2 ||
			die "conformance: the cluster DNS did not come back on the reference chain"
	fi
}
