#!/usr/bin/env bash
# The Postgres version matrix: source/postgres's golden type-table test,
# kill tests and partitioned-table tests against PostgreSQL 16, 17 and 18 (the pg16, pg17 and
# pg18 services of scripts/servers.sh), beside the whole package's run
# against Debian's 15 in make test's plain pass. One test binary, run
# once per version with OPENETL_TEST_POSTGRES_DSN pointed at that server
# and OPENETL_TEST_POSTGRES_MAJOR saying which major it must be (the
# tests fail on any other). The versions run one after another: make
# test runs this beside its plain pass, and one kill test at a time is
# what the two cores spare.
#
#   env=$(scripts/servers.sh start pg16 pg17 pg18) && eval "$env"
#   OPENETL_PYTHON=$(scripts/test-tools.sh) scripts/test-pgmatrix.sh [VERSION...]
#
# PGMATRIX_RUN overrides the tests run (a go test -run pattern; '.' runs
# the whole package, about 90 s a version); PGMATRIX_SKIP the tests left
# out (default: the two that start Debian 15 servers of their own, so
# would test 15 again, and the three that read only the pg17ha pair, so
# would test it again); arguments after -- go to the test binary. A
# version whose DSN is unset fails the run, unless OPENETL_SKIP_SERVERS=1,
# and so does a version where no test passed. Prints one line per
# version: its server's version, the tests passed, the seconds taken.
# SIGTERM (make test stopping it when its plain pass fails) stops the
# test binary and the pipeline processes it started, by process group.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run=${PGMATRIX_RUN:-'^(TestTypesGolden|TestKillDuringSnapshot.*|TestPartition.*)$'}
skip=${PGMATRIX_SKIP:-'^(TestRunRidesOutServerRestart|TestFastShutdownUnderRun|TestDecodeFromStandby|TestFailoverSlotFollowsPromotion|TestPromotionPastForkFails)$'}
versions=()
while (($#)); do
  case $1 in
  --) shift; break ;;
  *) versions+=("$1"); shift ;;
  esac
done
((${#versions[@]})) || versions=(16 17 18)
: "${OPENETL_PYTHON:?set OPENETL_PYTHON (scripts/test-tools.sh prints it): the tests read Parquet with pyarrow}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && ${GO:-go} test -c -o "$tmp/postgres.test" ./source/postgres/)
cd "$root/source/postgres" # the tests read testdata/ from there
rc=0
for v in "${versions[@]}"; do
  var=OPENETL_TEST_PG${v}_DSN
  d=${!var:-}
  if [ -z "$d" ]; then
    if [ "${OPENETL_SKIP_SERVERS:-}" = 1 ]; then
      echo "pgmatrix: PostgreSQL $v: skipped ($var is not set; OPENETL_SKIP_SERVERS=1)"
      continue
    fi
    echo "pgmatrix: $var is not set: start the server with scripts/servers.sh start pg$v" >&2
    rc=1
    continue
  fi
  t0=$SECONDS
  # setsid: a process group of its own (the background child is no group
  # leader, so setsid execs in place and $! is the test binary), which
  # the kill test's pipeline children join: the TERM trap stops them all.
  OPENETL_TEST_POSTGRES_DSN=$d OPENETL_TEST_POSTGRES_MAJOR=$v setsid "$tmp/postgres.test" -test.count=1 \
    -test.v -test.timeout 15m -test.run "$run" -test.skip "$skip" "$@" >"$tmp/pg$v.log" 2>&1 &
  child=$!
  trap 'echo "pgmatrix: stopping the tests (pid $child)" >&2; kill -TERM -- "-$child" 2>/dev/null || true; exit 143' TERM INT
  code=0
  wait "$child" || code=$?
  trap - TERM INT
  passed=$(grep -c '^--- PASS' "$tmp/pg$v.log" || true)
  if [ "$code" = 0 ] && [ "$passed" -gt 0 ]; then
    echo "pgmatrix: $(grep -m1 -o 'PostgreSQL [0-9.]*' "$tmp/pg$v.log" || echo "PostgreSQL $v"): ok, $passed passed" \
      "($(grep '^--- PASS' "$tmp/pg$v.log" | awk '{print $3}' | paste -sd ' ')) in $((SECONDS - t0))s"
  else
    echo "pgmatrix: PostgreSQL $v: FAILED (exit $code, $passed passed) in $((SECONDS - t0))s:" >&2
    grep -v '^=== ' "$tmp/pg$v.log" | tail -60 >&2
    rc=1
  fi
done
exit $rc
