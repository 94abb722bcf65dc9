# apt.sh: sourced by the hack/ scripts that install Debian packages.
# apt_install PKG...: installs the packages that are not installed yet (one
# apt-get update per script run, waiting for a dpkg lock another install
# holds); it reports through the caller's log function.
apt_updated=0
apt_install() {
	local missing=()
	for p in "$@"; do
		[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	log "apt-get install ${missing[*]}"
	if ((!apt_updated)); then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq -o DPkg::Lock::Timeout=300 >&2
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >&2
}
