#!/usr/bin/env bash
# ci-cold.sh: makes this machine as cold as a fresh one for .ci/run, then
# runs it from a clean clone of HEAD and prints its total. What it empties
# is what the suites install or cache, and only that:
#   - the packages hack/ installs (Open vSwitch, Docker, QEMU, debootstrap,
#     the runtimes' packages), purged, with what they pulled in and the
#     downloaded .debs;
#   - the harnesses' private dockerds and data roots (/var/lib/ovsflow-*:
#     images, nodes, conformance results), podman's storage;
#   - the caches: /opt/ovsflow-kube (Kubernetes, etcd, containerd, CoreDNS,
#     e2e.test), /opt/ovsflow-rt (the runtimes), /var/cache/ovsflow-vm (the
#     guest image), /var/cache/ovsflow-oid (the nodes' base root), the
#     harness tool's, Go's module, build, test and fuzz caches.
# The Go toolchain stays (a fresh machine has it; .ci/run checks).
#
#   sudo hack/ci-cold.sh -yes [LOG]   (LOG: default /tmp/ovsflow-ci-cold.log)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
export DEBIAN_FRONTEND=noninteractive
[ "${1:-}" = -yes ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
log=${2:-/tmp/ovsflow-ci-cold.log}
rev=$(git rev-parse HEAD)

# The harnesses' clusters and engines (each prefix has its own dockerd).
for d in /var/lib/ovsflow-*/docker; do
	[ -d "$d" ] || continue
	p=$(basename "$(dirname "$d")")
	OID_PREFIX=$p hack/ovs-in-docker.sh down -images >/dev/null 2>&1 || true
	# dockerd leaves its data root bind-mounted on itself
	umount -R "$d" 2>/dev/null || true
	rm -rf "/var/lib/$p"
done
for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^(cnitest-|ovsflow-)' || true); do ip netns del "$n" || true; done
apt-get purge -y -qq openvswitch-switch openvswitch-common ethtool nftables conntrack iputils-ping \
	dnsmasq-base qemu-system-x86 debootstrap iptables runc docker.io busybox-static podman conmon \
	containernetworking-plugins containerd stress-ng >/dev/null 2>&1 || true
apt-get autoremove --purge -y -qq >/dev/null
apt-get clean
rm -rf /opt/ovsflow-kube /opt/ovsflow-rt /var/cache/ovsflow-vm /var/cache/ovsflow-oid /var/lib/containers "${XDG_CACHE_HOME:-$HOME/.cache}/ovsflow"
go clean -cache -testcache -fuzzcache -modcache

d=$(mktemp -d /tmp/ovsflow-ci-cold.XXXXXX)
git clone -q . "$d"
echo "ci-cold: $rev, caches emptied; .ci/run from $d, its output in $log" >&2
t=$SECONDS rc=0
(cd "$d" && CI=1 bash .ci/run) >"$log" 2>&1 || rc=$?
echo "ci-cold: .ci/run at $rev: exit $rc in $((SECONDS - t)) s (cold)" | tee -a "$log"
exit $rc
