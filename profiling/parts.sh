# shellcheck shell=bash
# Sourced by the scripts for a GPU machine (device_check.sh, graph_targets.sh) once they have set $repo
# (the checkout) and $summary (the summary file): starts the summary with the date and the commit, and
# defines `part`, which runs one part of the check and records how it ended.
: >"${summary:?}"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "${repo:?}" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee -a "$summary"

# part NAME SECONDS LOG COMMAND...: run COMMAND under a time limit, its output to LOG and the console.
part() {
    local name=$1 limit=$2 log=$3 status
    shift 3
    echo "== $name" | tee -a "$summary"
    timeout "$limit" "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    echo "$name: exit $status$( ((status == 124)) && echo " (over its ${limit} s limit)")" >>"$summary"
}
