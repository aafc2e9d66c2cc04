#!/usr/bin/env bash
# Every package's tests (`pnpm test`): two packages at a time, then the reliability suite alone. The chaos
# runs of the reliability suite time failovers, kills and outages against servers of their own; alone they
# keep the machine's cores to themselves, as they did when every package ran one after another.
# `--continue` in both: one failing package hides no other. Exits non-zero when either run failed.
set -uo pipefail
turbo run test --concurrency=2 --continue --filter='!@duetime/reliability'
others=$?
turbo run test --continue --filter=@duetime/reliability
reliability=$?
[ "$others" -eq 0 ] && [ "$reliability" -eq 0 ]
