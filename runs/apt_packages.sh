# shellcheck shell=bash
# Sourced by runs/setup.sh and runs/test.sh: apt_install WHO REQUIRED PACKAGE...
# Installs those of PACKAGEs not installed yet (Debian 12 / Ubuntu 22.04 / 24.04). A package the
# distribution does not have (Ubuntu's chromium is a snap, not an apt package) stops the script
# with one line naming it when REQUIRED is 1 (a build dependency), else is skipped with one line
# (a test need: the tests that use it skip, naming it). DRY_RUN=1 prints what it would run.
# The apt tools are looked up on PATH, so tests can put fakes there (tests/setup_scripts_test.sh).

# why a package may be absent, for the skip line
apt_absent_note() {
  case "$1" in
    chromium) echo " (Ubuntu's chromium is a snap): the browser tests skip, naming /usr/bin/chromium" ;;
    *) echo "" ;;
  esac
}

apt_install() {
  local who=$1 required=$2
  shift 2
  local missing=() p
  for p in "$@"; do
    # no `cmd | grep -q` here: under the callers' pipefail it fails when grep -q exits before
    # cmd has written everything (cmd dies of SIGPIPE); plain grep reads all its input
    [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"install ok installed"* ]] || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "[$who] system packages present"
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "[$who] error: missing packages ${missing[*]} and no apt-get; install them by hand (docs/building.md)" >&2
    return 1
  fi
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "[$who] would run: $sudo apt-get update"
  else
    $sudo apt-get update -qq
  fi
  local install=() distro
  distro="$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-}")"
  for p in "${missing[@]}"; do
    # a package apt knows with a version to install ("Candidate: (none)" or no entry: it has none)
    if apt-cache policy "$p" 2>/dev/null | grep 'Candidate: [^(]' >/dev/null; then
      install+=("$p")
    elif [ "$required" = 1 ]; then
      echo "[$who] error: $p, needed to build nanochat, is not an apt package of ${distro:-this distribution} (docs/building.md)" >&2
      return 1
    else
      echo "[$who] skipping $p: not an apt package of ${distro:-this distribution}$(apt_absent_note "$p")"
    fi
  done
  [ ${#install[@]} -eq 0 ] && return 0
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "[$who] would run: $sudo apt-get install -y --no-install-recommends ${install[*]}"
    return 0
  fi
  echo "[$who] installing ${install[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${install[@]}" >/dev/null
}
