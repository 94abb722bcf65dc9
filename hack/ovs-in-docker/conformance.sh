# conformance.sh: sourced by hack/ovs-in-docker.sh. `conformance`: Kubernetes'
# own end-to-end suite (e2e.test of k8s.io/kubernetes at hack/lib/kube.sh's
# version) against the harness's cluster.
#
# What it needs, built here and cached under $kube_prefix (no registry is
# reachable): e2e.test and agnhost (kube_build_e2e), and the images the
# selected tests run, under the names the suite asks for
# (test/utils/image/manifest.go), imported into every node:
#   agnhost            a debootstrap'ed bookworm with the tools the tests run in it (curl,
#                      OpenBSD nc, dig, ip), /agnhost, entrypoint /agnhost, command pause
#   glibc-dns-testing  the same image under its name (a glibc with dig and getent)
#   busybox            Debian's static busybox and its applets, command sh
#   regression-issue-74839  its server, built from the same module
#   pause              the harness's pause under the suite's name
# e2e.test runs here against the cluster: --provider=skeleton (no cloud, no
# ssh to nodes), exec through the API server with the cached kubectl, its
# JUnit file and log kept under $DATA/conformance/<time>.

conf_default_focus='\[sig-network\] (HostPort |Networking Granular Checks: Pods |Conntrack |DNS should provide DNS for the cluster )'
conf_default_skip='SCTP|\[Disruptive\]|\[Serial\]'

# conf_images_build DIR: the image tars in DIR (each unless there).
conf_images_build() {
	local b=$1 reg=registry.k8s.io/e2e-test-images
	mkdir -p "$b"
	local pkgs=curl,netcat-openbsd,dnsutils,iproute2,ca-certificates,procps
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
		flock 8 && kube_build_e2e
	) 8>"$kube_prefix/.lock" || die "conformance: building e2e.test failed"
	exec 9>"$b/.lock"
	flock 9
	# set -e does not hold inside a function called with ||: run it on its own.
	conf_images_build "$b"
	exec 9>&-
}

# cmd_conformance [-focus RE] [-skip RE] [-nodes N] [-build]: the suite's
# tests whose names match -focus and not -skip against the cluster (brought
# up with N nodes, default 3, and deployed when none is up; left up).
# -build: only build what a run needs (CI builds it beside other stages).
cmd_conformance() {
	local focus=$conf_default_focus skip=$conf_default_skip n=3 build=0
	while (($#)); do
		case $1 in
		-focus) focus=$2; shift 2 ;;
		-skip) skip=$2; shift 2 ;;
		-nodes) n=$2; shift 2 ;;
		-build) build=1; shift ;;
		*) die "conformance: unknown argument $1" ;;
		esac
	done
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
	local node tar
	for node in $(kube_nodes); do
		for tar in "$kube_prefix"/build/conformance/*.oci.tar; do
			docker exec -i "$P-$node" /opt/ovsflow-kube/bin/ctr -n k8s.io images import --no-unpack - <"$tar" >/dev/null ||
				die "conformance: importing $tar into $node"
		done
		docker exec "$P-$node" /opt/ovsflow-kube/bin/ctr -n k8s.io images tag --force "$kube_pause_image" registry.k8s.io/pause:3.10.2 >/dev/null ||
			die "conformance: tagging the pause image on $node"
	done
	local out
	out=$DATA/conformance/$(date -u +%Y%m%dT%H%M%SZ)
	mkdir -p "$out"
	log "conformance: e2e.test $kube_version, focus '$focus', skip '$skip'; log and JUnit in $out"
	local rc=0
	"$kube_prefix/bin/e2e.test" --kubeconfig "$(admin_kubeconfig)" --provider=skeleton \
		--kubectl-path "$kube_prefix/bin/kubectl" --report-dir "$out" --disable-log-dump \
		--ginkgo.focus "$focus" --ginkgo.skip "$skip" --ginkgo.no-color --ginkgo.timeout 2h \
		>"$out/e2e.log" 2>&1 || rc=$?
	# Ginkgo's summary: "Ran R of T Specs ...", then "SUCCESS!|FAIL! -- P Passed | F Failed | ...".
	grep -E '^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!)' "$out/e2e.log" >&2 || tail -20 "$out/e2e.log" >&2
	grep -E '^  \[FAIL\]' "$out/e2e.log" >&2 || true
	local junit=$out/junit_01.xml passed=0 failed=0 skipped=0
	if [ -f "$junit" ]; then
		# Specs the run skipped itself (filtered ones say only "skipped").
		skipped=$(grep -c '<skipped message="skipped - ' "$junit" || true)
		failed=$(grep -c '<failure ' "$junit" || true)
		passed=$(sed -n 's/^Ran \([0-9]*\) of .*/\1/p' "$out/e2e.log" | head -1)
		passed=$((${passed:-0} - failed))
		awk 'match($0, /<testcase name="[^"]*"/) { name = substr($0, RSTART + 16, RLENGTH - 17) }
			match($0, /<skipped message="skipped - [^"]*"/) { print "  skipped: " name ": " substr($0, RSTART + 28, RLENGTH - 29) }' "$junit" >&2
	fi
	echo "CONFORMANCE passed=$passed failed=$failed skipped=$skipped took=$((SECONDS - t0))s junit=$junit log=$out/e2e.log"
	return $rc
}
