# node-ranges.sh: sourced by install-cni.sh. The node's pod ranges from its
# Node object, read with the pod's ServiceAccount token (the DaemonSet's
# ClusterRole allows "get" on nodes and nothing else).
#
#   node_pod_cidrs_from_api   prints spec.podCIDRs of node $NODE_NAME, comma-separated
#                             (IPv4 and/or IPv6, in the Node's order); fails, naming
#                             what is missing, when the API cannot be read or the
#                             Node has no podCIDRs yet (the node IPAM controller
#                             sets them shortly after the node registers)
#
# Environment: NODE_NAME (the downward API's spec.nodeName), KUBERNETES_SERVICE_HOST
# and KUBERNETES_SERVICE_PORT (set by kubelet in every pod), SERVICEACCOUNT_DIR
# (default /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt). Needs
# curl; parses the JSON with sed (the image has no jq).

node_pod_cidrs_from_api() {
	sa=${SERVICEACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
	if [ -z "${NODE_NAME:-}" ]; then
		echo "node_pod_cidrs_from_api: no pod CIDRs from the Node object: NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)" >&2
		return 1
	fi
	if [ -z "${KUBERNETES_SERVICE_HOST:-}" ]; then
		echo "node_pod_cidrs_from_api: no pod CIDRs from the Node object: KUBERNETES_SERVICE_HOST is not set (not in a pod?)" >&2
		return 1
	fi
	if [ ! -r "$sa/token" ] || [ ! -r "$sa/ca.crt" ]; then
		echo "node_pod_cidrs_from_api: no pod CIDRs from the Node object: no ServiceAccount token and CA in $sa" >&2
		return 1
	fi
	host=$KUBERNETES_SERVICE_HOST
	case $host in *:*) host="[$host]" ;; esac # an IPv6 service address
	# The token is read at each call: kubelet rotates the projected token.
	node=$(curl -sS --fail --max-time 10 --cacert "$sa/ca.crt" \
		-H "Authorization: Bearer $(cat "$sa/token")" -H "Accept: application/json" \
		"https://$host:${KUBERNETES_SERVICE_PORT:-443}/api/v1/nodes/$NODE_NAME") || {
		echo "node_pod_cidrs_from_api: no pod CIDRs from the Node object: cannot read node $NODE_NAME from the API" >&2
		return 1
	}
	# "podCIDRs": ["10.0.0.0/24", "fd00::/64"]: the list between the brackets,
	# quotes and blanks removed. CIDRs contain no quote, bracket or comma.
	cidrs=$(printf '%s' "$node" | tr -d ' \t\r\n' |
		sed -n 's/.*"podCIDRs":\[\([^]]*\)\].*/\1/p' | tr -d '"')
	if [ -z "$cidrs" ]; then
		echo "node_pod_cidrs_from_api: no pod CIDRs from the Node object: node $NODE_NAME has no spec.podCIDRs (yet)" >&2
		return 1
	fi
	echo "$cidrs"
}
