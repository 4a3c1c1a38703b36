# Sourced by the scripts that need root for apt or a Debian source
# package (contrib/setup.sh, contrib/ompi-examples/fetch.sh); they define
# log and die first.

if [ "$(id -u)" -eq 0 ]; then
    SUDO=
elif command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
else
    SUDO=missing
fi
as_root() {
    [ "$SUDO" != missing ] || die "installing packages needs root (or sudo): $*"
    $SUDO env DEBIAN_FRONTEND=noninteractive "$@"
}

# apt-get source needs deb-src entries for the suites the binaries came from.
# They are derived from the machine's own deb entries, so the same mirror and
# suites are used and nothing else is named here.
enable_deb_src() {
    if apt-get indextargets --format '$(CREATED_BY)' 2>/dev/null |
            grep -q '^Sources$'; then
        return
    fi
    local f out=/etc/apt/sources.list.d/ib2-deb-src.sources tmp
    tmp=$(mktemp)
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && [ "$f" != "$out" ] || continue
        # deb822: each stanza "Types: deb" becomes "Types: deb-src".
        sed -n -e 's/^Types:.*\bdeb\b.*$/Types: deb-src/' -e 'p' "$f" >>"$tmp"
        echo >>"$tmp"
    done
    if [ -f /etc/apt/sources.list ] &&
            grep -q '^deb ' /etc/apt/sources.list; then
        grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
            >"$tmp.list"
        as_root install -m 0644 "$tmp.list" /etc/apt/sources.list.d/ib2-deb-src.list
    fi
    if [ -s "$tmp" ]; then
        as_root install -m 0644 "$tmp" "$out"
    fi
    rm -f "$tmp" "$tmp.list"
    log "apt: enabled deb-src for the configured suites"
    as_root apt-get update -q
}
