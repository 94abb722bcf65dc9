#!/usr/bin/env bash
# ovs-vm.sh: the end-to-end suites on Open vSwitch's kernel datapath
# (datapath_type=system), inside a QEMU virtual machine that boots Debian's
# own kernel (this machine's kernel has no openvswitch module).
#
#   hack/ovs-vm.sh image          build the guest image, or reuse the cached one
#   hack/ovs-vm.sh test [SUITE]   build the binaries, boot the guest, run the suites
#                                 and exit with their result (default suite: e2e)
#   hack/ovs-vm.sh clean          remove the cached image
#
# Suites:
#   e2e          the test/e2e tests whose outcome depends on the datapath, on
#                system bridges: kernelDatapath of test/e2e/datapath_test.go, which
#                test/e2e/tools/kernel-tests turns into the -test.run regexp (the
#                others assert on OVSDB and OpenFlow tables alone and run on this
#                machine's netdev bridges). VM_RUN=REGEXP: the tests it matches
#                instead, as go test -run (VM_RUN=. the whole package)
#   e2e-all      the whole test/e2e package, as e2e with VM_RUN=.
#   events       hack/vswitchd-events.sh on a system bridge, N=1 and N=500
#                (VM_EVENTS_N="1 500"): ovs-vswitchd's reconfigurations per change
#                and per ADD of the chain, each counted over VM_EVENTS_WINDOW
#                seconds (5: everything is slower under emulation)
#
# Environment: VM_CACHE (default /var/cache/ovsflow-vm) holds the image, rebuilt
# only when its recipe (below) changes; VM_ACCEL=auto|kvm|tcg (auto: hardware KVM
# when the CPU has vmx/svm and the guest boots with it, else software emulation);
# VM_MEM (MiB, default 3072); VM_TIMEOUT (seconds, default 3600); VM_MIRROR
# (default: the Debian mirror of this machine's apt sources);
# VM_DATAPATH=netdev runs the same suites in the guest on the userspace
# datapath, to tell the kernel datapath's failures from the emulation's.
# Needs root (debootstrap, chroot); installs qemu-system-x86 and debootstrap
# with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

cache=${VM_CACHE:-/var/cache/ovsflow-vm}
accel=${VM_ACCEL:-auto}
mem=${VM_MEM:-3072}
timeout_s=${VM_TIMEOUT:-3600}

# The image recipe. Any change here changes the cache key and rebuilds the image.
suite=bookworm
packages=openvswitch-switch,iproute2,iputils-ping,ethtool,nftables,conntrack,dnsmasq-base,procps,kmod
kernel_packages="linux-image-amd64 initramfs-tools"
# PID 1 of the guest: mounts what the tests need and the payload disk (the
# binaries and the run script ovs-vm.sh writes for each run), runs it, prints
# its exit code and powers off. The kernel's own messages stay off the
# console (loglevel), so that the console is the tests' output.
read -r -d '' guest_init <<'EOF' || true
#!/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm /run/lock
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
hostname ovsflow-vm
ip link set lo up
echo "ovsflow-vm: booted $(uname -r)"
mkdir -p /ovsflow
if mount -t ext4 /dev/vdb /ovsflow; then
	/bin/bash /ovsflow/run.sh </dev/null
	rc=$?
	umount /ovsflow
else
	rc=125
fi
echo "ovsflow-vm: exit $rc"
sync
echo o >/proc/sysrq-trigger
sleep 30
EOF
# The Debian mirror of this machine's own apt sources (VM_MIRROR overrides;
# none found: debootstrap's default).
host_mirror() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && awk -v s="$suite" '/^URIs:/ {u = $2} /^Suites:/ {for (i = 2; i <= NF; i++) if ($i == s) print u}' "$f"
	done
	[ -f /etc/apt/sources.list ] && awk -v s="$suite" '$1 == "deb" && $0 !~ /\[/ && $3 == s {print $2}' /etc/apt/sources.list
	return 0
}
mirror=${VM_MIRROR:-$(host_mirror | sed -n 1p)}

key=$(printf '%s\n' 1 "$suite" "$packages" "$kernel_packages" "$guest_init" | sha256sum | cut -c1-16)

need_root() { [ "$(id -u)" = 0 ] || { echo "ovs-vm: needs root" >&2; exit 2; }; }

log() { echo "ovs-vm: $*" >&2; }
# shellcheck source=hack/lib/apt.sh
. hack/lib/apt.sh
install_tools() { apt_install qemu-system-x86 debootstrap e2fsprogs; }

# image: $cache/$key/{root.img,vmlinuz,initrd.img}, built once per recipe
# (in a subshell: its traps and lock are its own).
image() (
	need_root
	install_tools
	dir=$cache/$key
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9 # another run building the same image
	if [ -f "$dir/done" ]; then
		echo "ovs-vm: image $dir (cached)" >&2
		exit 0
	fi
	t0=$SECONDS
	# Images of older recipes go: only one is kept.
	find "$cache" -mindepth 1 -maxdepth 1 -not -name "$key" -not -name .lock -exec rm -rf {} +
	build=$cache/build.$$
	rm -rf "$build" "$dir"
	mkdir -p "$build"
	trap 'umount "$build/root/proc" 2>/dev/null || true; rm -rf "$build"' EXIT
	echo "ovs-vm: building the guest image (debootstrap $suite, about 3 minutes)" >&2
	# shellcheck disable=SC2086
	debootstrap --variant=minbase --include="$packages" "$suite" "$build/root" $mirror >"$build/log" 2>&1 ||
		{ tail -30 "$build/log" >&2; exit 1; }
	mount -t proc proc "$build/root/proc"
	# shellcheck disable=SC2086
	chroot "$build/root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$kernel_packages >>"$build/log" 2>&1 || { tail -30 "$build/log" >&2; exit 1; }
	umount "$build/root/proc"
	chroot "$build/root" apt-get clean
	rm -rf "$build"/root/usr/share/{doc,man,locale,info}/* "$build"/root/var/lib/apt/lists/*
	printf '%s\n' "$guest_init" >"$build/root/sbin/ovsflow-init"
	chmod 755 "$build/root/sbin/ovsflow-init"
	mkdir -p "$build/out"
	cp "$build"/root/boot/vmlinuz-* "$build/out/vmlinuz"
	cp "$build"/root/boot/initrd.img-* "$build/out/initrd.img"
	mkfs.ext4 -q -L ovsflow-root -d "$build/root" "$build/out/root.img" 2G >/dev/null
	touch "$build/out/done"
	mv "$build/out" "$dir"
	echo "ovs-vm: image $dir built in $((SECONDS - t0)) s" >&2
)

# payload DIR SUITES: what the guest runs, under DIR (the second disk).
payload() {
	local dir=$1 suites=$2
	mkdir -p "$dir/bin" "$dir/repo/hack/lib" "$dir/repo/test/e2e"
	# Static: the guest has Debian's libraries, not necessarily this machine's.
	export CGO_ENABLED=0
	go build -trimpath -ldflags='-s -w' -o "$dir/bin" ./cmd/... \
		github.com/containernetworking/plugins/plugins/ipam/host-local \
		github.com/containernetworking/plugins/plugins/ipam/static \
		github.com/containernetworking/plugins/plugins/ipam/dhcp \
		github.com/containernetworking/plugins/plugins/main/loopback \
		github.com/containernetworking/plugins/plugins/meta/sbr \
		github.com/containernetworking/cni/cnitool
	go test -c -trimpath -o "$dir/repo/test/e2e/e2e.test" ./test/e2e
	# The guest's selection: VM_RUN when given, else the tests marked as
	# depending on the datapath (e2e), or all of them (e2e-all).
	local run_e2e=${VM_RUN:-} run_all=${VM_RUN:-}
	case " $suites " in
	*" e2e "*)
		if [ -z "$run_e2e" ]; then
			run_e2e=$(go run ./test/e2e/tools/kernel-tests) || return 1
			log "e2e: the $(($(tr -cd '|' <<<"$run_e2e" | wc -c) + 1)) tests of test/e2e whose outcome depends on the datapath (e2e-all: all of them)"
		fi
		;;
	esac
	cp hack/ovs-sandbox.sh hack/vswitchd-events.sh "$dir/repo/hack/"
	cp hack/lib/apt.sh "$dir/repo/hack/lib/"
	{
		echo "# written by hack/ovs-vm.sh"
		printf 'suites=%q run_e2e=%q run_all=%q events_n=%q ci=%q datapath=%q window=%q\n' "$suites" "$run_e2e" "$run_all" "${VM_EVENTS_N:-1 500}" \
			"${CI:-}" "${VM_DATAPATH:-system}" "${VM_EVENTS_WINDOW:-5}"
		cat <<'EOF'
set -u
[ -n "$ci" ] && export CI=$ci
# tun: ovs-vswitchd's netdev code opens /dev/net/tun for internal ports of
# any bridge it probes; without it bridge creation fails silently.
modprobe -a openvswitch veth tun nf_conntrack nf_nat || exit 124
export OVSFLOW_DATAPATH=$datapath OVSFLOW_BIN=/ovsflow/bin
# Software emulation makes everything about ten times slower: the suites
# stretch their waits and divide their concurrency by OVSFLOW_TIME_SCALE
# (test/framework). Under KVM the guest runs at the hardware's speed.
case $(cat /proc/cmdline) in
*ovsflow.accel=kvm*) export OVSFLOW_TIME_SCALE=1 ;;
*) export OVSFLOW_TIME_SCALE=10 ;;
esac
echo "ovsflow-vm: $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MiB, $(ovs-vswitchd --version | head -1), datapath $datapath, OVSFLOW_TIME_SCALE=$OVSFLOW_TIME_SCALE"
rc=0
for s in $suites; do
	t0=$(date +%s)
	echo "ovsflow-vm: suite $s"
	case $s in
	e2e | e2e-all)
		run=$run_e2e
		[ "$s" = e2e-all ] && run=$run_all
		(cd /ovsflow/repo/test/e2e && ./e2e.test -test.v -test.count=1 -test.timeout=50m ${run:+-test.run "$run"}) || rc=1 ;;
	events) for n in $events_n; do DATAPATH=$datapath WINDOW=$window /ovsflow/repo/hack/vswitchd-events.sh "$n" || rc=1; done ;;
	*) echo "ovsflow-vm: unknown suite $s"; rc=2 ;;
	esac
	echo "ovsflow-vm: suite $s done in $(($(date +%s) - t0)) s (guest clock), rc so far $rc"
done
exit $rc
EOF
	} >"$dir/run.sh"
}

# boot ACCEL LOG: start the guest in the background (pid in $qpid).
boot() {
	local opts
	case $1 in
	kvm) opts=(-accel kvm -cpu host) ;;
	tcg) opts=(-accel tcg,thread=multi -cpu qemu64) ;;
	esac
	: >"$2"
	qemu-system-x86_64 "${opts[@]}" -smp 2 -m "$mem" -nodefaults -display none -no-reboot \
		-serial "file:$2" \
		-kernel "$cache/$key/vmlinuz" -initrd "$cache/$key/initrd.img" \
		-append "root=/dev/vda rw console=ttyS0 init=/sbin/ovsflow-init panic=-1 loglevel=1 mitigations=off ovsflow.accel=$1" \
		-drive "file=$cache/$key/root.img,format=raw,if=virtio,snapshot=on" \
		-drive "file=$work/payload.img,format=raw,if=virtio" </dev/null &
	qpid=$!
}

# kvm_usable: the CPU has hardware virtualisation and /dev/kvm is there. (A
# guest that then does not boot with it within 60 s is booted again under
# software emulation: see run_tests.)
kvm_usable() { grep -qwE 'vmx|svm' /proc/cpuinfo && [ -c /dev/kvm ]; }

run_tests() {
	need_root
	local suites=${*:-e2e}
	image
	work=$(mktemp -d /tmp/ovsflow-vm.XXXXXX)
	trap '[ -n "${qpid:-}" ] && kill "$qpid" 2>/dev/null; rm -rf "$work"' EXIT
	local t0=$SECONDS
	payload "$work/payload" "$suites"
	mkfs.ext4 -q -L ovsflow-payload -d "$work/payload" "$work/payload.img" 1G >/dev/null
	echo "ovs-vm: binaries built in $((SECONDS - t0)) s" >&2
	local log=$work/console.log a=tcg
	case $accel in
	kvm) a=kvm ;;
	auto) kvm_usable && a=kvm ;;
	esac
	t0=$SECONDS
	boot "$a" "$log"
	if [ "$a" = kvm ] && [ "$accel" = auto ]; then
		for _ in $(seq 60); do
			grep -q "ovsflow-vm: booted" "$log" && break
			kill -0 "$qpid" 2>/dev/null || break
			sleep 1
		done
		if ! grep -q "ovsflow-vm: booted" "$log"; then
			echo "ovs-vm: the guest does not boot with KVM here; software emulation" >&2
			kill "$qpid" 2>/dev/null
			wait "$qpid" 2>/dev/null || true
			a=tcg
			boot "$a" "$log"
		fi
	fi
	echo "ovs-vm: guest booting ($a, suites: $suites)" >&2
	local deadline=$((SECONDS + timeout_s))
	tail -n +1 -f --pid="$qpid" "$log" | sed -u 's/\r$//' &
	local tpid=$!
	while kill -0 "$qpid" 2>/dev/null; do
		if ((SECONDS > deadline)); then
			echo "ovs-vm: timeout after ${timeout_s} s; stopping the guest" >&2
			kill "$qpid" 2>/dev/null
			break
		fi
		sleep 2
	done
	wait "$qpid" 2>/dev/null || true
	wait "$tpid" 2>/dev/null || true
	qpid=
	local rc
	rc=$(tr -d '\r' <"$log" | sed -n 's/^ovsflow-vm: exit \([0-9]*\)$/\1/p' | tail -1)
	echo "ovs-vm: guest ran $((SECONDS - t0)) s ($a), exit ${rc:-none}" >&2
	[ -n "$rc" ] || { echo "ovs-vm: the guest stopped without a result" >&2; return 1; }
	return "$rc"
}

case ${1:-} in
image) image ;;
test)
	shift
	run_tests "$@"
	;;

clean) need_root; rm -rf "$cache" ;;
*)
	sed -n '2,/^set /p' "$0" | sed -n 's/^# \{0,1\}//p' >&2
	exit 2
	;;
esac
