#!/usr/bin/env bash
# install-runtimes.sh: everything the real-runtime suites (test/runtimes) need on
# a fresh Debian 12 machine. Idempotent: a second run installs and rewrites nothing.
#
#   hack/install-runtimes.sh [COMPONENT...]     (default: all)
#
#   containerd  containerd 1.6 + runc (apt), crictl v1.34.0 (Go module proxy), the images
#   podman      podman 4.3 + conmon + runc + containernetworking-plugins (apt), the images
#   crio        CRI-O v1.36.3 and its pinns, built from the Go module proxy's source
#               (about 5 min with a cold Go build cache; rebuilt only when missing or
#               of another version); conmon + runc + podman (apt: podman loads the
#               images into CRI-O's store), crictl, the images
#   cnitool     cnitool, at the version go.mod pins (Go module proxy)
#   images      busybox-static (apt); the pause and app OCI image tars and the app
#               rootfs, built here from test/runtimes/tools (no registry involved)
#
# Everything but the apt packages goes under $OVSFLOW_RT_PREFIX (default
# /opt/ovsflow-rt). Prints shell assignments for the suites:
#   CRICTL= CRIO= PINNS= CONMON= RUNC= CNITOOL= PAUSE_IMAGE= PAUSE_TAR= APP_IMAGE= APP_TAR= APP_ROOTFS=
# Starts no daemon. (Debian's podman package adds /etc/cni/net.d/87-podman-bridge.conflist;
# the suites use private conf dirs and never read it.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
export DEBIAN_FRONTEND=noninteractive

prefix=${OVSFLOW_RT_PREFIX:-/opt/ovsflow-rt}
crictl_version=v1.34.0
crio_version=v1.36.3
pause_image=rt.local/ovsflow-pause:1
app_image=rt.local/ovsflow-app:1

log() { echo "install-runtimes: $*" >&2; }

# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh # (the script runs from the repository root)

# replace moves $1 over $2 unless both have the same content.
replace() {
	if cmp -s "$1" "$2"; then rm -f "$1"; else mv -f "$1" "$2"; fi
}

gobuild() { CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' "$@"; }

install_crictl() {
	# "crictl --version" says "unknown" when built by go install: ask the build info.
	if [ -x "$prefix/bin/crictl" ] && go version -m "$prefix/bin/crictl" 2>/dev/null |
		grep -Eq "^[[:space:]]+mod[[:space:]]+sigs.k8s.io/cri-tools[[:space:]]+$crictl_version[[:space:]]"; then
		return 0
	fi
	log "go install sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
	GOBIN="$prefix/bin" CGO_ENABLED=0 go install "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
}

# CRI-O has no Debian 12 package: its module's source (the proxy serves exact
# versions) gives crio, built without cgo (no seccomp, which the suite does
# not need) and without the graph drivers and signing backends that need C
# libraries, and pinns (C, in the module's pinns/), which crio runs to pin a
# pod's namespaces. crio states its version in a constant; pinns is built in
# the same step, before crio, so a crio of the right version means both are.
install_crio() {
	if [ -x "$prefix/bin/crio" ] && [ -x "$prefix/bin/pinns" ] &&
		"$prefix/bin/crio" --version 2>/dev/null | grep -Eq "^crio version ${crio_version#v}\$"; then
		return 0
	fi
	local b=$prefix/build mod src
	mkdir -p "$b"
	log "building CRI-O $crio_version (crio, pinns)"
	mod=$(cd "$b" && go mod download -json "github.com/cri-o/cri-o@$crio_version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -d "$mod" ] || { log "go mod download github.com/cri-o/cri-o@$crio_version: no source dir"; return 1; }
	src=$b/cri-o
	rm -rf "$src"
	cp -r "$mod" "$src" # the module cache is read-only, and the build completes go.sum
	chmod -R u+w "$src"
	gcc -std=c99 -Os -Wall -Wextra -static -o "$b/pinns.new" "$src"/pinns/src/*.c
	(cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' \
		-tags "containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper btrfs_noversion containers_image_openpgp" \
		-o "$b/crio.new" ./cmd/crio)
	rm -rf "$src"
	mv -f "$b/pinns.new" "$prefix/bin/pinns"
	mv -f "$b/crio.new" "$prefix/bin/crio"
}

install_cnitool() {
	# A tool dependency in go.mod: built at the pinned version.
	gobuild -o "$prefix/bin/cnitool.new" github.com/containernetworking/cni/cnitool
	replace "$prefix/bin/cnitool.new" "$prefix/bin/cnitool"
}

install_images() {
	apt_install busybox-static
	local b=$prefix/build
	mkdir -p "$b" "$prefix/images"
	for t in pause rt-echo ocitar; do
		gobuild -o "$b/$t.new" "./test/runtimes/tools/$t"
		replace "$b/$t.new" "$b/$t"
	done
	"$b/ocitar" -o "$b/pause.tar" -name "$pause_image" -entrypoint '["/pause"]' -add /pause="$b/pause"
	replace "$b/pause.tar" "$prefix/images/pause.tar"
	# The app: rt-echo, plus a busybox shell for poking around.
	local args=(-add /rt-echo="$b/rt-echo" -add /bin/busybox=/bin/busybox)
	for a in sh ls cat ip nc wget sleep; do args+=(-link "/bin/$a=busybox"); done
	for d in /proc /sys /dev /etc /tmp /run /var; do args+=(-dir "$d"); done
	rm -rf "$b/rootfs.new"
	"$b/ocitar" -o "$b/app.tar" -name "$app_image" -entrypoint '["/rt-echo","-tcp","80","-udp","53"]' \
		-env PATH=/bin "${args[@]}" -rootfs "$b/rootfs.new"
	replace "$b/app.tar" "$prefix/images/app.tar"
	if [ -d "$prefix/rootfs" ] && diff -r --no-dereference -q "$b/rootfs.new" "$prefix/rootfs" >/dev/null 2>&1; then
		rm -rf "$b/rootfs.new"
	else
		rm -rf "$prefix/rootfs"
		mv "$b/rootfs.new" "$prefix/rootfs"
	fi
}

components=("$@")
((${#components[@]})) || components=(all)
want=()
for c in "${components[@]}"; do
	case $c in
	all) want+=(containerd podman crio cnitool images) ;;
	containerd | podman | crio | cnitool | images) want+=("$c") ;;
	*)
		sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
done
has() { [[ " ${want[*]} " == *" $1 "* ]]; }

[ "$(id -u)" = 0 ] || { log "needs root (apt-get, $prefix)"; exit 1; }
command -v go >/dev/null || { log "go toolchain missing"; exit 1; }
mkdir -p "$prefix/bin"
exec 9>"$prefix/.lock"
flock 9

if has containerd; then
	apt_install containerd runc
	install_crictl
	want+=(images)
fi
if has podman; then
	apt_install podman conmon runc containernetworking-plugins
	want+=(images)
fi
if has crio; then
	apt_install conmon runc podman gcc libc6-dev
	install_crictl
	install_crio
	want+=(images)
fi
has cnitool && install_cnitool
has images && install_images

{ has containerd || has crio; } && echo "CRICTL=$prefix/bin/crictl"
if has crio; then
	echo "CRIO=$prefix/bin/crio"
	echo "PINNS=$prefix/bin/pinns"
	echo "CONMON=$(command -v conmon)"
	echo "RUNC=$(command -v runc)"
fi
has cnitool && echo "CNITOOL=$prefix/bin/cnitool"
if has images; then
	echo "PAUSE_IMAGE=$pause_image"
	echo "PAUSE_TAR=$prefix/images/pause.tar"
	echo "APP_IMAGE=$app_image"
	echo "APP_TAR=$prefix/images/app.tar"
	echo "APP_ROOTFS=$prefix/rootfs"
fi
