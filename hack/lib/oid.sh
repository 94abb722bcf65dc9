# shellcheck shell=bash
# oid.sh: the harness's Go tool, test/cluster/cmd/ovs-in-docker (the engine,
# images, nodes, cluster and cached build of hack/ovs-in-docker.sh).
# Sourced from the repository root.

# oid_build KEY: builds the tool into the cache under KEY (one per harness
# prefix: a run never replaces the binary another runs), once per run (the
# OID_TOOL_BUILT it exports is inherited by the tests' calls back into the
# scripts), under a lock (CI runs the scripts side by side).
oid_build() {
	OID_TOOL=${XDG_CACHE_HOME:-${HOME:?}/.cache}/ovsflow/$1/ovs-in-docker
	[ "${OID_TOOL_BUILT:-}" = "$OID_TOOL" ] && [ -x "$OID_TOOL" ] && return 0
	mkdir -p "$(dirname "$OID_TOOL")"
	if ! (cd test/cluster && flock "$OID_TOOL.lock" go build -o "$OID_TOOL" ./cmd/ovs-in-docker); then
		echo "building the harness's tool (test/cluster/cmd/ovs-in-docker) failed" >&2
		return 1
	fi
	export OID_TOOL_BUILT=$OID_TOOL
}

oid() { "$OID_TOOL" "$@"; }
