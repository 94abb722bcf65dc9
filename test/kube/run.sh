#!/usr/bin/env bash
# test/kube/run.sh: the Kubernetes suite. A real single-node cluster
# (hack/kube.sh: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy, kubelet, containerd) around a private OVS node, the DaemonSet of
# deploy/ applied with kubectl, then pods through kubelet's own lifecycle.
# One line per check, then "N passed, M failed"; exits 1 on any failure.
# Needs root; without it, it says so and skips (in CI, with CI set, it fails).
#
#   test/kube/run.sh            (hack/kube.sh test runs it)
#   KEEP=1 test/kube/run.sh     leave the cluster up afterwards (hack/kube.sh down removes it)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

if [ "$(id -u)" != 0 ]; then
	echo "*** test/kube: not root: the Kubernetes suite is SKIPPED ***" >&2
	[ -n "${CI:-}" ] && exit 1
	exit 0
fi

t_start=$SECONDS
kube=hack/kube.sh
k() { $kube kubectl "$@"; }
innode() { $kube node "$@"; }
inext() { ip netns exec okube-ext "$@"; }
# send tcp|udp ADDR PORT: one exchange from the outside netns; prints the answer.
send() {
	inext python3 -c '
import socket, sys
proto, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
s.settimeout(3)
if proto == "tcp":
    s.connect((addr, port))
else:
    s.sendto(b"ping\n", (addr, port))
print(s.recv(200).decode().strip())' "$@"
}

pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# check NAME CMD...: one line, ok when CMD succeeds; CMD's output explains a failure.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then ok "$name"; else bad "$name: $(echo "$out" | tail -5 | tr '\n' ' ')"; fi
}
# retry SECONDS CMD...: CMD until it succeeds (its last output is printed on failure).
retry() {
	local secs=$1 out i
	shift
	for ((i = 0; i < secs * 4; i++)); do
		out=$("$@" 2>&1) && { [ -n "$out" ] && echo "$out"; return 0; }
		sleep 0.25
	done
	echo "$out"
	return 1
}

finish() {
	local rc=$?
	if ((fail)) || [ "$rc" != 0 ]; then
		echo "--- diagnostics"
		k get pods -A -o wide 2>&1 | head -40
		k get events -A --sort-by=.lastTimestamp 2>&1 | tail -30
		innode ovs-vsctl --db=unix:/run/openvswitch/db.sock show 2>&1 | head -60
		for f in kubelet containerd kube-controller-manager; do
			echo "--- $f.log (tail)"
			tail -15 "/run/ovsflow-kube/okube/log/$f.log" 2>/dev/null
		done
	fi
	[ -n "${KEEP:-}" ] || $kube down
	echo "$pass passed, $fail failed ($((SECONDS - t_start)) s)"
	((fail == 0)) && [ "$rc" = 0 ]
}
trap 'finish; exit $?' EXIT

t=$SECONDS
$kube install || exit 1
echo "# built or cached in $((SECONDS - t)) s"
t=$SECONDS
envs=$($kube up) || exit 1
eval "$envs"
echo "# cluster up in $((SECONDS - t)) s"
NODE_V4=203.0.113.10 NODE_V6=2001:db8:15::10 EXT_V4=203.0.113.20 EXT_V6=2001:db8:15::20
OVSDB=unix:/run/openvswitch/db.sock # inside the node's mount namespace
conflist=/etc/cni/net.d/10-ovsflow.conflist
ipamdir=/var/lib/cni/networks/ovsflow

# --- state of the node ----------------------------------------------------------

# pods_json: the test's pods (label suite=okube) as "name ip,ip" lines, running ones only.
pod_ips() {
	k get pods -l suite=okube --field-selector=status.phase=Running \
		-o jsonpath='{range .items[*]}{.metadata.name}{" "}{range .status.podIPs[*]}{.ip}{","}{end}{"\n"}{end}'
}
# ip_of POD [v4|v6]
ip_of() {
	k get pod "$1" -o jsonpath='{range .status.podIPs[*]}{.ip}{"\n"}{end}' |
		if [ "${2:-v4}" = v6 ]; then grep :; else grep -v :; fi
}
# dump: everything of the plugins on the node, one text to search in.
dump() {
	echo "== flows"
	innode ovs-ofctl dump-flows br0 | grep 'cookie=0xfc5'
	echo "== ovsdb"
	innode ovs-vsctl --db=$OVSDB --format=list --columns=name,external_ids find Port 'external_ids:"ovsflow.io/owner"=ovsflow-cni'
	echo "== nft"
	innode nft list table ip ovsflow_hostport 2>/dev/null
	innode nft list table ip6 ovsflow_hostport 2>/dev/null
	echo "== ipam"
	innode sh -c "cd $ipamdir 2>/dev/null && grep -H . [0-9]* 2>/dev/null"
	echo "== veths"
	innode ip -o link show type veth 2>/dev/null | grep -o 'ovf[0-9a-f]*'
}
# attachments: the attachments the plugins hold, one "sandbox-id" per line (from OVSDB).
attachments() {
	innode ovs-vsctl --db=$OVSDB --bare --columns=external_ids find Port 'external_ids:"ovsflow.io/owner"=ovsflow-cni' |
		grep -o 'ovsflow.io/container-id=[0-9a-f]*' | cut -d= -f2 | sort
}
# ours: the plugins' flows and nft tables on the node, as text.
ours() {
	innode ovs-ofctl dump-flows br0 | grep 'cookie=0xfc5'
	innode nft list table ip ovsflow_hostport 2>/dev/null
	innode nft list table ip6 ovsflow_hostport 2>/dev/null
}
# pod_addrs_in TEXT: the pod addresses TEXT mentions (not the node's LAN or
# services, 203.0.113.0/24 and 2001:db8:15::/64, nor the pods' gateways, .1 and
# ::1, nor MAC addresses).
pod_addrs_in() {
	echo "$1" | sed -E 's/([0-9a-f]{2}:){5}[0-9a-f]{2}/MAC/g' |
		grep -oE '([0-9]{1,3}\.){3}[0-9]{1,3}|[0-9a-f]{1,4}(:[0-9a-f]{0,4}){2,7}' |
		grep -vE '^(203\.0\.113\.|0\.0\.0\.0|255\.)|^2001:db8:15::|^fe80:|\.1$|::1$|^[0-9a-f]{1,4}:[0-9a-f]{1,4}$' |
		grep -E '\.|::|:.*:.*:' | sort -u
}
# consistent: every attachment of the node is a running pod's, and each of those
# has exactly one: ports, veths, IP allocations and flows all agree.
consistent() {
	local want got ipam veths d
	want=$(pod_ips | awk '{print $2}' | tr ',' '\n' | grep . | sort)
	ipam=$(innode sh -c "ls $ipamdir 2>/dev/null" | grep -E '^[0-9a-f.:]+$' | sort)
	[ "$want" = "$ipam" ] || { echo "IP allocations [$ipam], running pods' IPs [$want]"; return 1; }
	got=$(attachments)
	local ids
	ids=$(innode sh -c "cd $ipamdir && for f in [0-9]*; do head -1 \$f | tr -d '\r'; echo; done" 2>/dev/null | grep . | sort -u)
	[ "$got" = "$ids" ] || { echo "OVS ports of [$got], IP allocations of [$ids]"; return 1; }
	veths=$(innode ip -o link show type veth 2>/dev/null | grep -o 'ovf[0-9a-f]*' | sort)
	local exp=""
	for id in $ids; do exp+="ovf$(printf '%s/eth0' "$id" | sha256sum | cut -c1-12)"$'\n'; done
	exp=$(echo -n "$exp" | grep . | sort)
	[ "$veths" = "$exp" ] || { echo "veths [$veths], want [$exp]"; return 1; }
	# Every pod address in a flow or an nft element is a running pod's.
	local a
	for a in $(pod_addrs_in "$(ours)"); do
		# A here-string, not "echo | grep -q": under pipefail, grep -q
		# exiting at its match can kill the echo with SIGPIPE, and the
		# pipeline fails although the address is there.
		grep -qxF "$a" <<<"$want" && continue
		echo "flow or nft element for $a, no running pod has it:"
		ours | grep -F "$a" | sed -n 1p
		echo "running pods: $(echo $want)"
		return 1
	done
}
# gone TEXT...: none of TEXT (a gone pod's addresses, its sandbox id) is left anywhere.
gone() {
	local d w
	d=$(dump)
	for w in "$@"; do
		if echo "$d" | grep -E "(^|[^0-9a-f.:])$(echo "$w" | sed 's/\./\\./g')([^0-9a-f.:]|$)" >/dev/null; then
			echo "$w is still on the node:"
			echo "$d" | grep -F "$w" | head -5
			return 1
		fi
	done
}
# hello ADDR PORT [FROM-POD]: one TCP exchange with rt-echo through a host port,
# from the outside netns or from a pod; prints "hello from TAG to PEER".
hello() {
	local a=$1 p=$2
	case $a in *:*) a="[$a]" ;; esac
	if [ -n "${3:-}" ]; then
		k exec "$3" -- sh -c "echo | nc -w 3 ${1} $p" 2>&1
	else
		send tcp "$1" "$p" 2>&1 | tail -1
	fi
}
# answers ADDR PORT POD PEER [FROM-POD]: the host port reaches POD, which sees PEER.
answers() {
	local out
	out=$(hello "$1" "$2" "${5:-}")
	case $out in
	"hello from $3 to $4:"* | "hello from $3 to [$4]:"*) return 0 ;;
	esac
	echo "$1 port $2: got \"$out\", want hello from $3 to $4"
	return 1
}
sandbox_of() { # sandbox_of IP: the sandbox id the IP is allocated to
	innode sh -c "head -1 $ipamdir/$1 | tr -d '\r'"
}

# --- 1. the DaemonSet ---------------------------------------------------------
echo "# 1. the DaemonSet"
t=$SECONDS
check "1 DaemonSet image imported, deploy/ovsflow-cni.yaml applied, rollout complete" $kube deploy
check "1 the DaemonSet's pod is Ready" k -n kube-system wait pod -l app.kubernetes.io/name=ovsflow-cni --for=condition=Ready --timeout=60s
check "1 its agent container is ready (its /readyz)" retry 20 sh -c "[ \"\$($kube kubectl -n kube-system get pod -l app.kubernetes.io/name=ovsflow-cni -o jsonpath='{.items[0].status.containerStatuses[?(@.name==\"agent\")].ready}')\" = true ]"
check "1 the node is Ready (network ready through the CRI)" k wait node "$NODE" --for=condition=Ready --timeout=60s
podcidrs=$(k get node "$NODE" -o jsonpath='{.spec.podCIDRs}' | tr -d '[]"' | tr ',' ' ')
conf_subnets() { innode cat $conflist | python3 -c '
import json, sys
c = json.load(sys.stdin)
print(" ".join(sorted(r["subnet"] for p in c["plugins"] for rs in p.get("ipam", {}).get("ranges", []) for r in rs)))'; }
conflist_has_node_ranges() {
	local want got
	want=$(echo "$podcidrs" | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')
	got=$(conf_subnets)
	[ -n "$want" ] && [ "$got" = "$want" ] || { echo "conflist subnets [$got], Node spec.podCIDRs [$want]"; return 1; }
}
check "1 the node's conflist carries the Node's own spec.podCIDRs ($podcidrs)" retry 30 conflist_has_node_ranges
check "1 the agent answers /healthz and /readyz on the node's loopback" innode curl -sf http://127.0.0.1:9469/healthz http://127.0.0.1:9469/readyz
echo "# 1 took $((SECONDS - t)) s"

# --- 1b. the agent's Go tests (test/kube/agent_test.go), in the node -------------
echo "# 1b. the agent against the API server"
t=$SECONDS
kubetest=$(mktemp -d /var/tmp/okube-test.XXXXXX)
if go test -c -o "$kubetest/kube.test" ./test/kube >"$kubetest/build.log" 2>&1; then
	for tc in TestAgentRoutes TestAgentRouteClaims TestAgentConflistAndReadiness; do
		check "1b $tc" innode env OVSFLOW_KUBECONFIG="$STATE/pki/admin.kubeconfig" "$kubetest/kube.test" -test.count=1 -test.v -test.run "^$tc\$"
	done
else
	bad "1b building test/kube: $(tail -5 "$kubetest/build.log" | tr '\n' ' ')"
fi
rm -rf "$kubetest"
echo "# 1b took $((SECONDS - t)) s"

# --- 2. three Deployments with host ports --------------------------------------
echo "# 2. Deployments with hostPorts"
t=$SECONDS
web() { # web NAME HOSTPORT [HOSTIP]: a one-pod Deployment publishing container port 80
	cat <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: $1, labels: {suite: okube}}
		spec:
		  replicas: 1
		  selector: {matchLabels: {app: $1}}
		  strategy: {type: Recreate}
		  template:
		    metadata: {labels: {app: $1, suite: okube}}
		    spec:
		      dnsPolicy: Default
		      terminationGracePeriodSeconds: 2
		      containers:
		      - name: web
		        image: rt.local/ovsflow-app:1
		        imagePullPolicy: Never
		        ports:
		        - {containerPort: 80, hostPort: $2, protocol: TCP${3:+, hostIP: \"$3\"}}
		        - {containerPort: 53, hostPort: $2, protocol: UDP${3:+, hostIP: \"$3\"}}
		        readinessProbe: {tcpSocket: {port: 80}, periodSeconds: 1}
	EOF
}
pod_of() { k get pod -l "app=$1" --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}'; }
{
	web web1 18081
	echo ---
	web web2 18082
	echo ---
	web web3 18083
	echo ---
	cat <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: client, labels: {suite: okube}}
		spec:
		  dnsPolicy: Default
		  terminationGracePeriodSeconds: 1
		  containers:
		  - {name: client, image: rt.local/ovsflow-app:1, imagePullPolicy: Never, command: ["/rt-echo", "-tcp", "8080"]}
	EOF
} | k apply -f - >/dev/null
check "2 three Deployments (hostPorts 18081-18083) and a client pod: all Running" \
	sh -c "$kube kubectl rollout status deployment/web1 deployment/web2 deployment/web3 --timeout=90s && $kube kubectl wait pod/client --for=condition=Ready --timeout=60s"
cl4=$(ip_of client v4)
cl6=$(ip_of client v6)
for n in 1 2 3; do
	pod=$(pod_of web$n)
	check "2 web$n: hostPort 1808$n answers from outside ($NODE_V4), the pod sees the client's address" answers $NODE_V4 1808$n "$pod" $EXT_V4
	check "2 web$n: hostPort 1808$n answers from another pod, the pod sees that pod's address" answers $NODE_V4 1808$n "$pod" "$cl4" client
done
udp() { # udp ADDR PORT POD PEER: rt-echo's UDP answer through the host port
	local out
	out=$(send udp "$1" "$2" 2>&1 | tail -1)
	case $out in "hello from $3 to $4:"* | "hello from $3 to [$4]:"*) return 0 ;; esac
	echo "udp $1 port $2: got \"$out\""
	return 1
}
check "2 web1: UDP hostPort 18081 answers from outside" udp $NODE_V4 18081 "$(pod_of web1)" $EXT_V4
check "2 every attachment on the node belongs to a running pod (ports, veths, IPs, flows)" consistent
scrape() { # the agent's /metrics, from the DaemonSet's pod, names the pods' host ports and attachments
	local out
	out=$(innode curl -sf http://127.0.0.1:9469/metrics) || { echo "no /metrics"; return 1; }
	for want in 'ovsflow_up 1' 'ovsflow_host_ports{' "pod=\"$(pod_of web1)\"" 'ovsflow_reconcile_total{' 'ovsflow_conntrack_zone_limit{'; do
		grep -qF "$want" <<<"$out" || { echo "/metrics has no $want:"; grep '^ovsflow_' <<<"$out" | head -20; return 1; }
	done
}
check "2 the agent's /metrics (Prometheus text) names the host ports, the pods' attachments, reconciles and zone limits" retry 10 scrape
echo "# 2 took $((SECONDS - t)) s"

# --- 6 (here, on the same pods): dual stack --------------------------------------
echo "# 6. dual stack"
check "6 the Node has an IPv4 and an IPv6 pod range ($podcidrs)" sh -c "echo '$podcidrs' | grep -q '\.' && echo '$podcidrs' | grep -q ':'"
check "6 pods have an IPv4 and an IPv6 address (client: $cl4 $cl6)" sh -c "[ -n '$cl4' ] && [ -n '$cl6' ]"
for n in 1 2 3; do
	pod=$(pod_of web$n)
	check "6 web$n: hostPort 1808$n answers on $NODE_V6 from outside, the pod sees $EXT_V6" answers $NODE_V6 1808$n "$pod" $EXT_V6
done
check "6 web2: hostPort 18082 on $NODE_V6 from another pod, the pod sees its IPv6 address" answers $NODE_V6 18082 "$(pod_of web2)" "$cl6" client

# --- 3. two pods asking for the same host port ---------------------------------
echo "# 3. hostPort conflict"
t=$SECONDS
# The scheduler and kubelet refuse two pods with the same (hostIP, protocol,
# hostPort) on one node, and treat 0.0.0.0 alone as "every address": so the
# pods below pass both, and the conflict is the plugin's to find: "::" means
# every IPv6 node address to ovs-portmap, 2001:db8:15::10 among them.
hold() { # hold NAME HOSTIP: a bare pod publishing port 18090 on HOSTIP
	cat <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: $1, labels: {suite: okube}}
		spec:
		  dnsPolicy: Default
		  terminationGracePeriodSeconds: 1
		  containers:
		  - name: web
		    image: rt.local/ovsflow-app:1
		    imagePullPolicy: Never
		    ports: [{containerPort: 80, hostPort: 18090, hostIP: "$2"}]
	EOF
}
hold holder "::" | k apply -f - >/dev/null
check "3 pod holder (hostPort 18090 on ::) Running" k wait pod/holder --for=condition=Ready --timeout=60s
holder_sb=$(sandbox_of "$(ip_of holder v4)")
check "3 holder answers on [$NODE_V6]:18090" answers $NODE_V6 18090 holder $EXT_V6
hold second "$NODE_V6" | k apply -f - >/dev/null
sandbox_events() { k get events --field-selector involvedObject.name=second,reason=FailedCreatePodSandBox -o jsonpath='{range .items[*]}{.message}{"\n"}{end}'; }
conflict_event() {
	local ev
	ev=$(sandbox_events)
	grep -q "host port conflict" <<<"$ev" && grep -qF "$holder_sb" <<<"$ev" ||
		{ echo "events of pod second: ${ev:-none}"; return 1; }
}
check "3 pod second (hostPort 18090 on $NODE_V6) gets an event naming holder's attachment ($holder_sb)" retry 60 conflict_event
echo "# event: $(sandbox_events | head -1 | cut -c1-400)"
waiting_reason() { k get pod second -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}'; }
sleep 3
check "3 pod second stays in ContainerCreating" sh -c "[ '$(waiting_reason)' = ContainerCreating ] || { echo 'state: $(waiting_reason)'; exit 1; }"
check "3 the failed sandboxes of second left nothing behind" consistent
k delete pod holder --wait=true >/dev/null
second_up() { k wait pod/second --for=condition=Ready --timeout=2s >/dev/null && answers $NODE_V6 18090 second $EXT_V6; }
check "3 holder deleted: second starts and answers on [$NODE_V6]:18090" retry 90 second_up
check "3 holder's attachment is gone" retry 20 gone "$holder_sb"
k delete pod second --wait=true >/dev/null
check "3 after both are deleted, every attachment belongs to a running pod" retry 20 consistent
echo "# 3 took $((SECONDS - t)) s"

# --- 4. kubelet's lifecycle ------------------------------------------------------
echo "# 4. lifecycle"
t=$SECONDS
# 4a kubectl delete pod: the Deployment replaces it.
old=$(pod_of web1)
old4=$(ip_of "$old" v4) old6=$(ip_of "$old" v6)
oldsb=$(sandbox_of "$old4")
k delete pod "$old" --wait=true >/dev/null
check "4 kubectl delete pod $old: its addresses and sandbox are gone from ports, flows, nft, IPAM, veths" retry 20 gone "$old4" "$old6" "$oldsb"
replaced() { local p; p=$(pod_of web1); [ -n "$p" ] && [ "$p" != "$old" ] && answers $NODE_V4 18081 "$p" $EXT_V4; }
check "4 the Deployment's new pod answers on hostPort 18081" retry 60 replaced
all_answer() { # all_answer N...: the web pods N answer from outside
	local n p
	for n in "$@"; do
		p=$(pod_of web$n)
		[ -n "$p" ] && answers $NODE_V4 1808$n "$p" $EXT_V4 || return 1
	done
}
check "4 survivors web2, web3 keep answering" all_answer 2 3
check "4 after the delete, every attachment belongs to a running pod" retry 20 consistent

# 4b a container exits (PID 1 killed) and kubelet restarts it in the same sandbox.
pod=$(pod_of web2)
ip2=$(ip_of "$pod" v4)
rc0=$(k get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')
k exec "$pod" -- sh -c 'kill 1' >/dev/null 2>&1
check "4 $pod's container exited and was restarted by kubelet (restartCount > $rc0)" retry 60 sh -c "[ \"\$($kube kubectl get pod $pod -o jsonpath='{.status.containerStatuses[0].restartCount}')\" -gt $rc0 ]"
check "4 after the restart $pod answers on hostPort 18082 with the same address $ip2" retry 30 answers $NODE_V4 18082 "$pod" $EXT_V4
check "4 after the container restart, every attachment belongs to a running pod" consistent

# 4c kubelet restarted while pods run.
before=$(attachments)
kpid=$(cat /run/ovsflow-kube/okube/pid/kubelet)
kill "$kpid"
for _ in $(seq 50); do kill -0 "$kpid" 2>/dev/null || break; sleep 0.1; done
check "4 with kubelet stopped, hostPorts keep answering" answers $NODE_V4 18083 "$(pod_of web3)" $EXT_V4
$kube restart-kubelet
check "4 kubelet restarted: the node is Ready again" retry 60 sh -c "$kube kubectl get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
sleep 5 # kubelet's first sync of the pods it finds
same_attachments() { local now; now=$(attachments); [ "$now" = "$before" ] || { echo "attachments [$before] became [$now]"; return 1; }; }
check "4 after the kubelet restart: the same attachments, no sandbox recreated" same_attachments
for n in 1 2 3; do
	check "4 after the kubelet restart web$n answers" answers $NODE_V4 1808$n "$(pod_of web$n)" $EXT_V4
done
check "4 after the kubelet restart, every attachment belongs to a running pod" consistent

# 4d kubectl drain: every pod but the DaemonSet's (hostNetwork) leaves the node.
gone_ids=$(attachments)
gone_ips=$(pod_ips | awk '{print $2}' | tr ',' ' ')
check "4 kubectl drain $NODE (DaemonSet kept, the bare client pod forced)" \
	k drain "$NODE" --ignore-daemonsets --force --delete-emptydir-data --timeout=90s
check "4 after drain: no attachment left on the node (ports, flows, nft, IPAM, veths)" retry 30 gone $gone_ids $gone_ips
check "4 after drain: the DaemonSet's pod still Ready" k -n kube-system wait pod -l app.kubernetes.io/name=ovsflow-cni --for=condition=Ready --timeout=10s
k uncordon "$NODE" >/dev/null
k apply -f - >/dev/null <<-EOF
	apiVersion: v1
	kind: Pod
	metadata: {name: client, labels: {suite: okube}}
	spec:
	  dnsPolicy: Default
	  terminationGracePeriodSeconds: 1
	  containers:
	  - {name: client, image: rt.local/ovsflow-app:1, imagePullPolicy: Never, command: ["/rt-echo", "-tcp", "8080"]}
EOF
check "4 uncordon: the Deployments come back and answer" retry 90 all_answer 1 2 3
check "4 after uncordon, every attachment belongs to a running pod" retry 20 consistent
echo "# 4 took $((SECONDS - t)) s"

# --- 5. ovs-vswitchd killed under running pods -----------------------------------
echo "# 5. ovs-vswitchd killed"
t=$SECONDS
restart_counts() { k get pods -l suite=okube -o jsonpath='{range .items[*]}{.metadata.name}={.status.containerStatuses[0].restartCount}{" "}{end}'; }
no_restarts() { local now; now=$(restart_counts); [ "$now" = "$restarts" ] || { echo "restart counts [$restarts] became [$now]"; return 1; }; }
before=$(attachments)
restarts=$(restart_counts)
kill -9 "$(cat /run/ovsflow/okube-node/ovs-vswitchd.pid)"
unserved() { innode curl -s http://127.0.0.1:9469/readyz | grep -F '[-]bridges: no OpenFlow endpoint for bridge br0'; }
check "5 with ovs-vswitchd dead the agent's /readyz says br0 is not served" retry 10 unserved
hack/ovs-sandbox.sh start-vswitchd okube-node
# The node's own addresses are its network configuration's to restore (the
# bridge's internal interface was re-created); the pods' gateways are reconcile's.
ip -n okube-node addr replace $NODE_V4/25 dev br0
ip -n okube-node addr replace $NODE_V6/64 dev br0 nodad
ip -n okube-node link set br0 up
ip netns exec okube-node ethtool -K br0 tx off >/dev/null
t5=$SECONDS
for n in 1 2 3; do
	pod=$(pod_of web$n)
	check "5 web$n: hostPort 1808$n answers again on $NODE_V4 after the ovs-vswitchd restart" retry 30 answers $NODE_V4 1808$n "$pod" $EXT_V4
	check "5 web$n: and on $NODE_V6" retry 10 answers $NODE_V6 1808$n "$pod" $EXT_V6
done
echo "# hostPorts answered again $((SECONDS - t5)) s after ovs-vswitchd was started"
check "5 no CNI call: the same attachments (no sandbox recreated)" same_attachments
check "5 no CNI call: no container restarted" no_restarts
check "5 the agent is ready again (/readyz)" retry 30 innode curl -sf http://127.0.0.1:9469/readyz
check "5 the agent rebuilt the flows (its log)" sh -c "$kube kubectl -n kube-system logs -l app.kubernetes.io/name=ovsflow-cni -c agent --tail=50 | grep -q 'reconcile: attachments=[1-9]'"
k wait pod/client --for=condition=Ready --timeout=30s >/dev/null
check "5 from another pod, hostPort 18082 answers again" retry 20 answers $NODE_V4 18082 "$(pod_of web2)" "$(ip_of client v4)" client
echo "# 5 took $((SECONDS - t)) s"

# --- the end: everything deleted ----------------------------------------------------
all_ids=$(attachments)
all_ips=$(pod_ips | awk '{print $2}' | tr ',' ' ')
k delete deployment web1 web2 web3 --wait=true >/dev/null
k delete pod -l suite=okube --wait=true >/dev/null
check "all pods deleted: nothing of theirs is left on the node" retry 30 gone $all_ids $all_ips

