# tests.sh: `hack/ovs-in-docker.sh test` and `demo`, sourced by
# hack/ovs-in-docker.sh (its helpers and names). Each check prints one line,
# "ok" or "FAIL" and what was checked (a failure adds what was seen); the
# run ends with "N passed, M failed". OID_KEEP=1 leaves the nodes up after.

npass=0
nfail=0
failed=()

# check DESC CMD...: runs CMD; its success is the check's.
check() {
	local desc=$1 out f
	shift
	f=$(mktemp)
	# In this shell, not a subshell: runpod records the pods it starts.
	"$@" >"$f" 2>&1
	local rc=$?
	out=$(cat "$f")
	rm -f "$f"
	if ((rc == 0)); then
		npass=$((npass + 1))
		echo "ok   $desc"
	else
		nfail=$((nfail + 1))
		failed+=("$desc")
		echo "FAIL $desc"
		[ -z "$out" ] || printf '%s\n' "$out" | tail -8 | sed 's/^/       | /'
	fi
}

nx() { docker exec "$P-$1" "${@:2}"; }

declare -A POD_ID POD_IP4 POD_IP6 POD_NS POD_NODE
# runpod NODE NAME [HOSTPORT:PORT]...: a pod through crictl (CNI ADD); records its addresses.
runpod() {
	local node=$1 name=$2 out
	shift 2
	out=$(nx "$node" oid-pod run "$name" "$@" 2>&1) || { echo "$out"; return 1; }
	read -r POD_ID[$name] POD_IP4[$name] POD_IP6[$name] POD_NS[$name] <<<"$(tail -1 <<<"$out")"
	POD_NODE[$name]=$node
}

# tcp_get WHERE IP PORT: the first line a TCP server at IP:PORT answers,
# connecting from WHERE: "host" (the Docker host), a node (its own network
# namespace) or "pod:NAME".
tcp_get() {
	local where=$1 script="exec 3<>/dev/tcp/$2/$3 && head -1 <&3"
	case $where in
	host) timeout 5 bash -c "$script" ;;
	pod:*) nx "${POD_NODE[${where#pod:}]}" timeout 5 nsenter --net="${POD_NS[${where#pod:}]}" bash -c "$script" ;;
	*) nx "$where" timeout 5 bash -c "$script" ;;
	esac
}

# answers WHERE IP PORT PATTERN: the answer matches the (grep -E) PATTERN.
answers() {
	local got
	got=$(tcp_get "$1" "$2" "$3" 2>&1) || true
	if grep -Eq -- "$4" <<<"$got"; then return 0; fi
	echo "from $1 to $2 port $3: got \"$got\", want /$4/"
	return 1
}

# bracket prints an address as it appears in an answer's peer ("[v6]" or v4).
peer() { if [[ $1 == *:* ]]; then echo "\\[$1\\]:"; else echo "$1:"; fi; }

# clean NODE: nothing of ours left on the node (ports, veths, flows, nft
# elements, IP allocations, sandboxes). A listing that fails is a failure.
clean() {
	local node=$1 bad=0 x
	lists() { # WHAT CMD...: the output of CMD in the node, or a failure
		local out
		out=$(nx "$node" "${@:2}" 2>&1) || { echo "$node: $1: listing failed: $out" >&2; return 1; }
		printf '%s\n' "$out"
	}
	x=$(lists ports ovs-vsctl list-ports br0) || bad=1
	x=$(grep -vx eth0 <<<"$x" | grep . || true)
	[ -z "$x" ] || { echo "$node: ports left on br0: $x"; bad=1; }
	x=$(lists "our ports" ovs-vsctl --bare --columns=name find Port external_ids:ovsflow.io/owner=ovsflow-cni) || bad=1
	[ -z "$x" ] || { echo "$node: ports of ours (external_ids:ovsflow.io/owner) left: $x"; bad=1; }
	x=$(lists veths ip -o link show type veth) || bad=1
	x=$(grep -v ': eth0@' <<<"$x" | grep . || true) # eth0: the uplink, Docker's veth
	[ -z "$x" ] || { echo "$node: veths left: $x"; bad=1; }
	# Flows of any attachment (host ports, port security); the bridge's shared
	# flows of tables 42 and 43 (cookie kind 0) stay, as the nft tables do.
	# The tombstones of deleted ports (kind 3) go by their 10 s hard timeout:
	# wait for that, so that the check proves they do go.
	local i
	for i in $(seq 12); do
		x=$(lists flows ovs-ofctl dump-flows br0 "cookie=0x0fc5000000000000/0xffff000000000000") || bad=1
		x=$(grep cookie= <<<"$x" | grep -v 'cookie=0xfc5000000000000,' || true)
		# done when none is left, or when one is left that is not a tombstone
		if [ -z "$x" ] || grep -qv 'cookie=0xfc5030000000000,' <<<"$x"; then break; fi
		sleep 1
	done
	[ -z "$x" ] || { echo "$node: flows of ours left:"; echo "$x" | cut -c1-160 | head -5; bad=1; }
	for fam in ip ip6; do
		# No table (never a host port on this node) is no element either.
		x=$(nx "$node" nft list map "$fam" ovsflow_hostport hostports 2>/dev/null | grep -A3 'elements' || true)
		[ -z "$x" ] || { echo "$node: nft $fam elements left: $x"; bad=1; }
	done
	x=$(lists allocations sh -c '[ ! -d /var/lib/cni/networks/ovsflow ] || ls /var/lib/cni/networks/ovsflow') || bad=1
	x=$(grep -v -e "^last_reserved_ip" -e "^lock$" <<<"$x" | grep . || true)
	[ -z "$x" ] || { echo "$node: IP allocations left: $x"; bad=1; }
	x=$(lists sandboxes crictl pods -q) || bad=1
	[ -z "$x" ] || { echo "$node: pod sandboxes left: $x"; bad=1; }
	return $bad
}

# cni_state NODE: what a CNI ADD or DEL leaves changed (ports, allocations).
cni_state() {
	nx "$1" sh -c "$cni_state_script"
}
cni_state_script='ovs-vsctl --bare --columns=_uuid,name,external_ids list Interface | sort; ls -l --time-style=+%s.%N /var/lib/cni/networks/ovsflow | grep -v last_reserved_ip'
# same_cni_state NODE STATE: the node's state is still STATE.
same_cni_state() { diff <(echo "$2") <(cni_state "$1"); }

ms() { date +%s%3N; }

# wait_answers LIMIT_MS "WHERE IP PORT PATTERN"...: until every one answers
# as expected or LIMIT_MS passed; prints the milliseconds taken.
wait_answers() {
	local limit=$1 t0 ok c
	shift
	t0=$(ms)
	while :; do
		ok=1
		for c in "$@"; do
			# shellcheck disable=SC2086
			answers $c >/dev/null 2>&1 || { ok=0; break; }
		done
		((ok || $(ms) - t0 > limit)) && break
		sleep 0.1
	done
	echo "$(($(ms) - t0))"
	((ok))
}

cmd_test() {
	local n=3 kube=0
	while (($#)); do
		case $1 in
		-nodes) n=$2; shift 2 ;;
		-kube) kube=1; shift ;;
		*) die "test: unknown argument $1" ;;
		esac
	done
	((kube)) && { kube_test "$n"; return; }
	((n >= 2)) || die "test: -nodes $n: want at least 2"
	local t0=$SECONDS
	cmd_up -nodes "$n" || die "up failed"
	local tup=$SECONDS
	if [ "${OID_KEEP:-}" != 1 ]; then trap 'cmd_down >/dev/null 2>&1 || true' EXIT; fi
	run_tests "$n"
	echo "$npass passed, $nfail failed ($((SECONDS - tup)) s of tests, $((tup - t0)) s of up)"
	((nfail == 0))
}

run_tests() {
	set +eu # every check counts, a failed one included
	local n=$1 i x t
	local n1=n1 n2=n2 h4 h6
	h4=$(gw4) h6=$(gw6) # the Docker host on the nodes' network
	local n1v4 n1v6 n2v4 n2v6
	n1v4=$(node4 1) n1v6=$(node6 1) n2v4=$(node4 2) n2v6=$(node6 2)

	echo "== 0. the nodes as the DaemonSet left them"
	local ver
	ver=$(version)
	for ((i = 1; i <= n; i++)); do
		check "0 n$i: conflist rendered with n$i's pod ranges, gateway the first address" \
			bash -c "c=\$(docker exec $P-n$i cat /etc/cni/net.d/10-ovsflow.conflist) && grep -q '\"subnet\": \"$(pod4 "$i")\"' <<<\"\$c\" && grep -q '\"gateway\": \"$(first4 "$i")\"' <<<\"\$c\" && grep -q '\"subnet\": \"$(pod6 "$i")\"' <<<\"\$c\" || { echo \"\$c\"; exit 1; }"
		check "0 n$i: ovs-bridge, ovs-portmap, host-local, loopback installed; ours say $ver" \
			bash -c "docker exec $P-n$i sh -c 'ls /opt/cni/bin/host-local /opt/cni/bin/loopback && /opt/cni/bin/ovs-bridge; /opt/cni/bin/ovs-portmap' 2>&1 | tee /dev/stderr | grep -c 'ovsflow) $ver\$' | grep -qx 2"
	done

	check "0 exec passes standard input through and returns the command's exit status" \
		bash -c "out=\$(echo oid-data | '$0' exec n1 sh -c 'cat > /tmp/oid-copied; exit 3'); rc=\$?; [ \$rc = 3 ] && [ \"\$('$0' exec n1 cat /tmp/oid-copied)\" = oid-data ] || { echo \"rc \$rc\"; exit 1; }"

	echo "== 1. pod to pod across nodes, TCP, IPv4 and IPv6"
	check "1 pod a1 on n1 started (crictl runp: CNI ADD)" runpod n1 a1
	check "1 pod a2 on n2 started" runpod n2 a2
	check "1 a1 (n1) -> a2 (n2) IPv4, a2 sees a1's address" answers pod:a1 "${POD_IP4[a2]}" 80 "hello from a2 to $(peer "${POD_IP4[a1]}")"
	check "1 a1 (n1) -> a2 (n2) IPv6, a2 sees a1's address" answers pod:a1 "${POD_IP6[a2]}" 80 "hello from a2 to $(peer "${POD_IP6[a1]}")"
	check "1 a2 (n2) -> a1 (n1) IPv4" answers pod:a2 "${POD_IP4[a1]}" 80 "hello from a1 to $(peer "${POD_IP4[a2]}")"
	check "1 a2 (n2) -> a1 (n1) IPv6" answers pod:a2 "${POD_IP6[a1]}" 80 "hello from a1 to $(peer "${POD_IP6[a2]}")"
	for ((i = 3; i <= n; i++)); do
		check "1 pod a$i on n$i started" runpod "n$i" "a$i"
		check "1 a1 (n1) -> a$i (n$i) IPv4" answers pod:a1 "${POD_IP4[a$i]}" 80 "hello from a$i to $(peer "${POD_IP4[a1]}")"
		check "1 a$i (n$i) -> a2 (n2) IPv6" answers "pod:a$i" "${POD_IP6[a2]}" 80 "hello from a2 to $(peer "${POD_IP6[a$i]}")"
	done

	echo "== 2. a hostPort on n1 (8080 -> pod h1:80)"
	check "2 pod h1 on n1 with hostPort 8080 started" runpod n1 h1 8080:80
	check "2 from n2's own netns, h1 sees n2's address" answers n2 "$n1v4" 8080 "hello from h1 to $(peer "$n2v4")"
	check "2 from n2's own netns over IPv6" answers n2 "$n1v6" 8080 "hello from h1 to $(peer "$n2v6")"
	check "2 from pod a2 on n2, h1 sees a2's address" answers pod:a2 "$n1v4" 8080 "hello from h1 to $(peer "${POD_IP4[a2]}")"
	check "2 from the Docker host, h1 sees the host's address" answers host "$n1v4" 8080 "hello from h1 to $(peer "$h4")"
	check "2 from the Docker host over IPv6" answers host "$n1v6" 8080 "hello from h1 to $(peer "$h6")"
	check "2 from pod a1 on n1 (hairpin)" answers pod:a1 "$n1v4" 8080 "hello from h1 to "
	check "2 from pod a1 on n1 (hairpin) over IPv6" answers pod:a1 "$n1v6" 8080 "hello from h1 to "
	check "2 from n1's own netns" answers n1 "$n1v4" 8080 "hello from h1 to "

	echo "== 3. the same hostPort (8081) on each node serves that node's pod"
	check "3 pod w1 on n1 with hostPort 8081 started" runpod n1 w1 8081:80
	check "3 pod w2 on n2 with hostPort 8081 started" runpod n2 w2 8081:80
	check "3 the Docker host -> n1:8081 is w1" answers host "$n1v4" 8081 "hello from w1 to $(peer "$h4")"
	check "3 the Docker host -> n2:8081 is w2" answers host "$n2v4" 8081 "hello from w2 to $(peer "$h4")"
	check "3 n2 -> n1:8081 is w1" answers n2 "$n1v4" 8081 "hello from w1 to $(peer "$n2v4")"
	check "3 n1 -> n2:8081 over IPv6 is w2" answers n1 "$n2v6" 8081 "hello from w2 to $(peer "$n1v6")"

	echo "== 4. a hostPort conflict on n1 is refused; n2 is unaffected"
	x=$(cni_state n1)
	check "4 pod c1 on n1 with hostPort 8080 (h1's) is refused by the runtime's ADD" \
		bash -c "! out=\$(docker exec $P-n1 oid-pod run c1 8080:80 2>&1) && grep -q 'host port conflict' <<<\"\$out\" || { echo \"\$out\" | tail -2; exit 1; }"
	check "4 the refused ADD left n1's ports and allocations as they were" \
		same_cni_state n1 "$x"
	check "4 n1:8080 still h1" answers host "$n1v4" 8080 "hello from h1 to "
	check "4 pod c2 on n2 with hostPort 8080 started (no conflict there)" runpod n2 c2 8080:80
	check "4 the Docker host -> n2:8080 is c2" answers host "$n2v4" 8080 "hello from c2 to $(peer "$h4")"
	check "4 n2:8081 still w2" answers host "$n2v4" 8081 "hello from w2 to "

	echo "== 5. Open vSwitch of n1 restarted, then n1 restarted (docker restart)"
	local n1ports=("host $n1v4 8080 hello.from.h1" "host $n1v6 8080 hello.from.h1" "host $n1v4 8081 hello.from.w1" "host $n1v6 8081 hello.from.w1" "n2 $n1v4 8080 hello.from.h1")
	check "5 n1's db.sock belongs to the openvswitch user" bash -c "docker exec $P-n1 stat -c %U /run/openvswitch/db.sock | grep -qx openvswitch"
	check "5 the reconcile container runs with /proc/sys read-only and only NET_ADMIN and DAC_OVERRIDE" \
		bash -c "pid=\$(docker exec $P-n1 pgrep -f 'ovs-portmap reconcile') && docker exec $P-n1 grep -E '^CapEff:.*0000000000001002\$' /proc/\$pid/status && docker exec $P-n1 nsenter -t \$pid -m sh -c '! echo 0 2>/dev/null >/proc/sys/net/ipv4/conf/br0/arp_ignore'"
	check "5 (without DAC_OVERRIDE, reconcile cannot open db.sock: the manifest's capability is needed)" \
		bash -c "out=\$(docker exec $P-n1 setpriv --bounding-set=-all,+net_admin --inh-caps=-all -- /opt/ovsflow/bin/ovs-portmap reconcile -ovsdb unix:/var/run/openvswitch/db.sock 2>&1); rc=\$?; echo \"\$out\"; [ \$rc != 0 ] && grep -qi 'permission denied' <<<\"\$out\""
	x=$(cni_state n1)
	local recs
	recs=$(nx n1 grep -c 'reconcile: attachments=' /var/log/oid/reconcile.log || true)
	check "5 ovs-vswitchd and ovsdb-server of n1 killed and started again" nx n1 node-init.sh ovs-restart
	t=$(wait_answers 5000 "${n1ports[@]}")
	check "5 every hostPort of n1 answers again within 5 s of ovs-vswitchd being up (${t} ms)" wait_answers 0 "${n1ports[@]}"
	check "5 the reconcile container rebuilt the flows (a reconcile pass after the restart, with attachments)" \
		bash -c "docker exec $P-n1 tail -n +$((recs + 1)) /var/log/oid/reconcile.log | grep -E 'reconcile: attachments=[1-9]'"
	check "5 no CNI call: n1's ports and allocations as they were" \
		same_cni_state n1 "$x"
	check "5 pod to pod again: a2 (n2) -> a1 (n1) IPv4" answers pod:a2 "${POD_IP4[a1]}" 80 "hello from a1 to $(peer "${POD_IP4[a2]}")"
	check "5 pod to pod again: a1 (n1) -> a2 (n2) IPv6" answers pod:a1 "${POD_IP6[a2]}" 80 "hello from a2 to $(peer "${POD_IP6[a1]}")"

	check "5 docker restart of n1" docker restart "$P-n1"
	check "5 n1 booted again (OVS, node prep, containerd, install-cni, reconcile)" wait_ready n1
	check "5 n1's OVS came back from its database: br0 with its uplink" bash -c "docker exec $P-n1 ovs-vsctl list-ports br0 | grep -qx eth0"
	check "5 n1's pods died with the node; removing them (CNI DEL) works" nx n1 oid-pod rm --all
	check "5 n1 clean after the pods' removal" clean n1
	check "5 new pods on n1: a1, h1 (8080), w1 (8081)" eval 'runpod n1 a1 && runpod n1 h1 8080:80 && runpod n1 w1 8081:80'
	t=$(wait_answers 5000 "${n1ports[@]}")
	check "5 every hostPort of n1 answers after the reboot (${t} ms)" wait_answers 0 "${n1ports[@]}"
	check "5 pod to pod after the reboot: a1 (n1) -> a2 (n2)" answers pod:a1 "${POD_IP4[a2]}" 80 "hello from a2 to $(peer "${POD_IP4[a1]}")"
	check "5 pod to pod after the reboot: a2 (n2) -> a1 (n1) IPv6" answers pod:a2 "${POD_IP6[a1]}" 80 "hello from a1 to $(peer "${POD_IP6[a2]}")"

	echo "== 6. docker kill of n2 while it adds pods"
	docker exec -d "$P-n2" bash -c 'for i in 1 2 3 4 5 6 7 8; do oid-pod run k$i 909$i:80; done' >/dev/null
	for _ in $(seq 100); do
		[ -n "$(nx n2 crictl pods -q --name '^k' 2>/dev/null)" ] && break
		sleep 0.1
	done
	sleep 0.3
	check "6 docker kill of n2 (pods being added: $(nx n2 crictl pods -q --name '^k' 2>/dev/null | wc -l) so far)" docker kill "$P-n2"
	check "6 n1 keeps serving: the Docker host -> n1:8080 is h1" answers host "$n1v4" 8080 "hello from h1 to "
	check "6 n1 keeps serving: n1:8081 over IPv6 is w1" answers host "$n1v6" 8081 "hello from w1 to "
	check "6 n1 keeps serving: pod a1 -> n1:8081 (hairpin)" answers pod:a1 "$n1v4" 8081 "hello from w1 to "
	check "6 n2 started again" docker start "$P-n2"
	check "6 n2 booted again" wait_ready n2
	check "6 deleting n2's pods (CNI DEL of each) works" nx n2 oid-pod rm --all
	check "6 deleting them left nothing on n2" clean n2
	check "6 a new pod a2 on n2" runpod n2 a2
	check "6 a2 (n2) -> a1 (n1) IPv4" answers pod:a2 "${POD_IP4[a1]}" 80 "hello from a1 to $(peer "${POD_IP4[a2]}")"

	echo "== 7. every pod removed: nothing of ours left"
	for ((i = 1; i <= n; i++)); do
		check "7 n$i: every pod removed" nx "n$i" oid-pod rm --all
		check "7 n$i: no port, veth, flow, nft element, IP allocation or sandbox left" clean "n$i"
	done
}

# step CMD...: prints the command (as typed at the Docker host) and its output.
step() {
	printf '$'
	printf ' %q' "$@"
	echo
	"$@" 2>&1 | sed 's/^/  /'
}

cmd_demo() {
	local n1v4 n2v4
	if [ "${1:-}" = -kube ]; then
		shift
		local n=3
		[ "${1:-}" = -nodes ] && n=$2
		kube_demo "$n"
		return
	fi
	echo "# Two nodes: Docker containers running Open vSwitch, containerd (CRI) and the plugins."
	cmd_up -nodes 2 || die "up failed"
	trap 'echo "# Removing everything."; cmd_down' EXIT
	n1v4=$(node4 1) n2v4=$(node4 2)
	echo
	echo "# Each node's conflist, rendered by install-cni.sh from the node's pod CIDRs:"
	step "$0" exec n1 grep -A1 '"gateway"' /etc/cni/net.d/10-ovsflow.conflist
	step "$0" exec n2 grep -A1 '"gateway"' /etc/cni/net.d/10-ovsflow.conflist
	echo
	echo "# A pod with hostPort 8080 -> 80 on each node (crictl runp with port_mappings: CNI ADD):"
	step "$0" exec n1 oid-pod run web-n1 8080:80
	step "$0" exec n2 oid-pod run web-n2 8080:80
	echo
	echo "# The Docker host reaches each node's host port (the pod sees this host's address):"
	step timeout 5 bash -c "exec 3<>/dev/tcp/$n1v4/8080 && head -1 <&3"
	step timeout 5 bash -c "exec 3<>/dev/tcp/$n2v4/8080 && head -1 <&3"
	echo
	echo "# Across nodes: n2 reaches n1's host port, n1 reaches n2's (the pods see the other node's address):"
	step "$0" exec n2 timeout 5 bash -c "exec 3<>/dev/tcp/$n1v4/8080 && head -1 <&3"
	step "$0" exec n1 timeout 5 bash -c "exec 3<>/dev/tcp/$n2v4/8080 && head -1 <&3"
	echo
	echo "# The flows ovs-portmap wrote on n1 for web-n1's host port:"
	step "$0" exec n1 sh -c "ovs-ofctl dump-flows br0 --no-stats | grep 'tp_dst=8080' | cut -c1-150"
	echo
	echo "# Pods removed (CNI DEL):"
	step "$0" exec n1 oid-pod rm web-n1
	step "$0" exec n2 oid-pod rm web-n2
}
