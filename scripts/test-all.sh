#!/usr/bin/env bash
# Every package's tests (`pnpm test`), in three phases:
#   1. the packages whose tests time no crash or failover against a shared server (core, conformance's own,
#      cli, dashboard, packaging, bindings, the examples but custom-adapter, bench), two at a time;
#   2. the backends and the custom-adapter example (each runs the conformance suite, whose crash and
#      failover tests are timed), one at a time;
#   3. the reliability suite.
# DUETIME_TEST_CONCURRENCY sets phase 2's concurrency too (default 1): two at a time shortens the run but,
# in two of four fresh-clone runs, a test that times a crash or a failover ran out of time beside another
# package's load (see docs/contributing.md). `--continue` everywhere: one failing package hides no other.
# Exits non-zero when any phase failed.
set -uo pipefail
TIMED=(--filter='@duetime/backend-*' --filter=@duetime/example-custom-adapter)
turbo run test --concurrency=2 --continue --filter='!@duetime/reliability' --filter='!@duetime/backend-*' \
  --filter='!@duetime/example-custom-adapter'
light=$?
turbo run test --concurrency="${DUETIME_TEST_CONCURRENCY:-1}" --continue "${TIMED[@]}"
timed=$?
turbo run test --continue --filter=@duetime/reliability
reliability=$?
[ "$light" -eq 0 ] && [ "$timed" -eq 0 ] && [ "$reliability" -eq 0 ]
