# apt.sh: sourced by the hack/ scripts that install Debian packages.
# apt_install PKG...: installs the packages that are not installed yet (one
# apt-get update per script run). Scripts may install at the same time
# (.ci/run builds caches in the background): each apt-get runs under one
# flock, because apt-get update does not wait for the lists lock another
# apt-get holds. It reports through the caller's log function.
apt_updated=0
apt_install() {
	local missing=()
	for p in "$@"; do
		[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	log "apt-get install ${missing[*]}"
	mkdir -p /run/lock # (a minimal guest may not have it)
	(
		flock 7
		export DEBIAN_FRONTEND=noninteractive
		((apt_updated)) || apt-get update -qq -o DPkg::Lock::Timeout=300 >&2
		apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >&2
	) 7>/run/lock/ovsflow-apt.lock
	apt_updated=1
}
