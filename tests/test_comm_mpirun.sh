#!/usr/bin/env bash
# test_comm_mpirun.sh — runs a program under Open MPI's mpirun for the tests: NP processes,
# oversubscribed (more processes than cores is fine on a 2-core CI machine), --allow-run-as-root
# when root. Usage: test_comm_mpirun.sh NP PROGRAM [ARGS...]
# env: MPIRUN (default: mpirun on PATH), MPIRUN_FLAGS (more flags, e.g. "--mca btl self,tcp").
set -uo pipefail
np=${1:?usage: $0 NP PROGRAM [ARGS...]}; shift
mpirun=${MPIRUN:-mpirun}
flags=(-np "$np" --oversubscribe)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# shellcheck disable=SC2206
[ -n "${MPIRUN_FLAGS:-}" ] && flags+=($MPIRUN_FLAGS)
exec "$mpirun" "${flags[@]}" "$@"
