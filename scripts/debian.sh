# Sourced by the scripts that use Debian's packages (scripts/test.sh, deploy/smoke-image.sh).
#
# `debian_packages WHO PACKAGE...` installs the packages when this is a root shell with apt-get,
# else names them on stderr ("WHO needs ...") and returns 1.
debian_packages() {
  local who=$1
  shift
  [ $# -gt 0 ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages $who uses: $*"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  else
    echo "$who needs Debian packages: $* (apt-get install them as root)" >&2
    return 1
  fi
}
