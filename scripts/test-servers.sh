#!/usr/bin/env bash
# Checks that scripts/servers.sh's Debian installs wait for a dpkg lock
# another process holds instead of failing (what two apt-gets at once, or
# an unattended upgrade, do to a bare apt-get). Holds the dpkg frontend
# lock the way apt and dpkg take it (an fcntl lock, not flock) for a few
# seconds, and runs two servers.sh apt installs of the tests' packages
# meanwhile: both must wait and succeed. Needs root and the packages
# installed already (make test runs it after the servers started), so the
# installs change nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ "$(id -u)" = 0 ] || { echo "test-servers: needs root (apt-get); not run" >&2; exit 0; }
command -v apt-get >/dev/null || { echo "test-servers: no apt-get; not run" >&2; exit 0; }
pkgs=(postgresql-15 mariadb-server mariadb-client clickhouse-server clickhouse-client)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    { echo "test-servers: $p is not installed (run scripts/servers.sh install first)" >&2; exit 1; }
done
versions() { dpkg-query -W -f='${Package} ${Version}\n' "${pkgs[@]}"; }
before=$(versions)
tmp=$(mktemp -d)
trap 'kill "${holder:-}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
# make test runs this in the background and stops it with SIGTERM when
# the Go tests fail first: let go of the lock then too.
trap 'exit 143' TERM INT
mkfifo "$tmp/locked" "$tmp/release"
# The holder says when it has the lock, and lets go when told (or after 60 s).
python3 - "$tmp/locked" "$tmp/release" <<'PY' &
import fcntl, sys, select, os
f = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[1], "w").write("locked\n")
r = os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK)
select.select([r], [], [], 60)
PY
holder=$!
read -r _ <"$tmp/locked"
# While the lock is held, a bare apt-get fails at once: the check is real.
if apt-get -q -o DPkg::Lock::Timeout=0 install -y --no-upgrade "${pkgs[0]}" >"$tmp/bare.log" 2>&1; then
  echo "test-servers: apt-get ran while the dpkg lock was held; the check proves nothing" >&2
  exit 1
fi
grep -q 'Could not get lock' "$tmp/bare.log" || { cat "$tmp/bare.log" >&2; exit 1; }
OPENETL_CACHE=$tmp/cache "$here/servers.sh" apt "${pkgs[@]}" 2>"$tmp/a.log" &
a=$!
OPENETL_CACHE=$tmp/cache "$here/servers.sh" apt "${pkgs[@]}" 2>"$tmp/b.log" &
b=$!
# Let go only once an install is waiting on the lock: apt's own message.
for ((i = 0; i < 600; i++)); do
  grep -qs 'Waiting for cache lock' "$tmp/a.log" "$tmp/b.log" && break
  kill -0 "$a" 2>/dev/null || kill -0 "$b" 2>/dev/null || break
  sleep 0.1
done
waited=$(grep -ls 'Waiting for cache lock' "$tmp/a.log" "$tmp/b.log" | wc -l)
echo release >"$tmp/release"
rc=0
wait "$a" || { echo "test-servers: first install failed:" >&2; cat "$tmp/a.log" >&2; rc=1; }
wait "$b" || { echo "test-servers: second install failed:" >&2; cat "$tmp/b.log" >&2; rc=1; }
[ "$waited" -ge 1 ] || { echo "test-servers: no install waited for the lock:" >&2; cat "$tmp/a.log" "$tmp/b.log" >&2; rc=1; }
# Installs of what is installed change nothing: an upgrade under the
# running test servers breaks them (a new plpgsql.so in an old postgres).
after=$(versions)
[ "$before" = "$after" ] || { echo "test-servers: the installs changed installed versions:" >&2; diff <(echo "$before") <(echo "$after") >&2; rc=1; }
[ $rc -eq 0 ] && echo "test-servers: two installs waited for a held dpkg lock and succeeded"
exit $rc
