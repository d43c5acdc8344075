#!/bin/bash
# postmortem-epilog.sh: one postmortem report per failed Slurm job.
#
# Three ways to run it (see docs/epilog.md):
#   1. as EpilogSlurmctld (slurm.conf: EpilogSlurmctld=/etc/slurm/postmortem-epilog.sh): runs once per
#      job on the controller, as SlurmUser; Slurm sets SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_EXIT_CODE2
#      ("exit:signal") and SLURM_SCRIPT_CONTEXT=epilog_slurmctld. The analysis is detached so that
#      slurmctld's script thread returns at once.
#   2. as a follow-up job that runs only when the job failed:
#        sbatch --dependency=afternotok:$JOBID --kill-on-invalid-dep=yes -t 15 -c 2 --mem 8G \
#               postmortem-epilog.sh $JOBID $JOB_DIR
#   3. by hand: postmortem-epilog.sh JOB_ID JOB_DIR
#
# Writes JOB_DIR/postmortem/{report.md,report.json,report.html,postmortem.log,exit_code}, or
# $POSTMORTEM_FALLBACK_DIR/JOB_ID/ when JOB_DIR is not writable. Always exits 0: a report that could
# not be written must never fail the job or the controller's epilog.
#
# Site settings (environment, or edit the defaults here):
#   POSTMORTEM_BIN          the postmortem executable (Slurm runs epilogs with no PATH)
#   POSTMORTEM_JOB_DIR      the job's log folder; or POSTMORTEM_JOB_DIR_PATTERN with %j (job id) and
#                           %u (user), e.g. /shared/jobs/%u/%j; SLURM_JOB_WORK_DIR is used when set
#   POSTMORTEM_FORMATS      md,json,html
#   POSTMORTEM_TIMEOUT      seconds before the analysis is stopped (600)
#   POSTMORTEM_FAIL_ON      severity that makes postmortem exit 1 (error); recorded, never fatal here
#   POSTMORTEM_ON_SUCCESS   1: also report jobs that ended 0:0 (default: failed jobs only)
#   POSTMORTEM_FORCE        1: write a new report even if this job already has one
#   POSTMORTEM_FALLBACK_DIR where reports go when JOB_DIR/postmortem cannot be written
#   POSTMORTEM_CACHE        on/off: keep postmortem's cache of the run, so that a later `postmortem tui
#                           JOB_DIR` opens at once. It lives in the cache folder of the user who runs
#                           this script: by default on when that is the job's own user (a follow-up
#                           job, by hand), off otherwise (the controller's SlurmUser: nobody opens it)

set -u
PATH=/usr/local/bin:/usr/bin:/bin
export PATH

POSTMORTEM_BIN=${POSTMORTEM_BIN:-/opt/postmortem/.venv/bin/postmortem}
POSTMORTEM_FORMATS=${POSTMORTEM_FORMATS:-md,json,html}
POSTMORTEM_TIMEOUT=${POSTMORTEM_TIMEOUT:-600}
POSTMORTEM_FAIL_ON=${POSTMORTEM_FAIL_ON:-error}
POSTMORTEM_ON_SUCCESS=${POSTMORTEM_ON_SUCCESS:-0}
POSTMORTEM_FORCE=${POSTMORTEM_FORCE:-0}
POSTMORTEM_FALLBACK_DIR=${POSTMORTEM_FALLBACK_DIR:-/var/spool/postmortem}
if [ -z "${POSTMORTEM_CACHE:-}" ]; then
    if [ -n "${SLURM_JOB_USER:-}" ] && [ "$SLURM_JOB_USER" != "$(id -un 2>/dev/null)" ]; then
        POSTMORTEM_CACHE=off
    else
        POSTMORTEM_CACHE=on
    fi
fi

log() { logger -t postmortem-epilog -- "$*" 2>/dev/null || printf 'postmortem-epilog: %s\n' "$*" >&2; }

job_id=${1:-${SLURM_JOB_ID:-}}
job_dir=${2:-${POSTMORTEM_JOB_DIR:-${SLURM_JOB_WORK_DIR:-}}}
if [ -z "$job_dir" ] && [ -n "${POSTMORTEM_JOB_DIR_PATTERN:-}" ]; then
    job_dir=${POSTMORTEM_JOB_DIR_PATTERN//%j/$job_id}
    job_dir=${job_dir//%u/${SLURM_JOB_USER:-}}
fi
if [ -z "$job_id" ] || [ -z "$job_dir" ]; then
    log "usage: postmortem-epilog.sh JOB_ID JOB_DIR (or run as EpilogSlurmctld with POSTMORTEM_JOB_DIR_PATTERN)"
    exit 0
fi

# Only failed jobs: EXIT_CODE2 is "exit:signal"; 0:0 is a clean exit (a time limit or scancel shows a signal).
if [ "${SLURM_SCRIPT_CONTEXT:-}" = epilog_slurmctld ] && [ "${SLURM_JOB_EXIT_CODE2:-}" = "0:0" ] \
        && [ "$POSTMORTEM_ON_SUCCESS" != 1 ]; then
    exit 0
fi
if [ ! -d "$job_dir" ]; then
    log "job $job_id: no log folder $job_dir; no report"
    exit 0
fi

# Safety (docs/security.md): the job's user controls $job_dir, so a file there may be a link planted
# to make this script (the scheduler's user) overwrite something. Reports go only into a folder that
# is ours and that nobody else can write (not a link, owned by us, no group/other write), entered
# with cd so that the folder cannot be swapped for a link afterwards; every file is written under a
# random temporary name (mktemp: created new, never through a link) and renamed into place.
ours() {
    [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ -z "$(find "$1" -maxdepth 0 -perm /022 2>/dev/null)" ]
}
enter() {
    { [ -e "$1" ] || [ -L "$1" ] || mkdir -m 755 -- "$1" 2>/dev/null; } && ours "$1" && cd -P -- "$1" 2>/dev/null && ours .
}
out=$job_dir/postmortem
if ! enter "$out"; then
    out=$POSTMORTEM_FALLBACK_DIR/$job_id
    mkdir -p -- "$POSTMORTEM_FALLBACK_DIR" 2>/dev/null
    enter "$out" || { log "job $job_id: cannot write $out (missing, a link, or not ours alone); no report"; exit 0; }
fi

# put FILE: stdin into FILE in the current folder, atomically (a temporary file, then rename).
put() {
    local tmp
    tmp=$(mktemp "./.$1.XXXXXX") || return 1
    if cat >"$tmp" && mv -f -T -- "$tmp" "$1"; then
        return 0
    fi
    rm -f -- "$tmp"
    return 1
}

run_report() {
    # One report per job: a lock while it runs, and a finished report is not redone (POSTMORTEM_FORCE=1 does).
    exec 9>>./.lock || return 0
    flock -n 9 || { log "job $job_id: a report is already being written in $out"; return 0; }
    if [ -s ./exit_code ] && [ "$POSTMORTEM_FORCE" != 1 ]; then
        return 0
    fi
    local started rc tmp cache=()
    [ "$POSTMORTEM_CACHE" = off ] && cache=(--no-cache)
    started=$(date +%s)
    tmp=$(mktemp ./.postmortem.log.XXXXXX) || return 0
    # --out .: this folder, entered above (postmortem itself refuses links inside the job folder too)
    nice -n 19 timeout --kill-after=30 "$POSTMORTEM_TIMEOUT" \
        "$POSTMORTEM_BIN" report "$job_dir" --format "$POSTMORTEM_FORMATS" --out . \
        --fail-on "$POSTMORTEM_FAIL_ON" --quiet ${cache[@]+"${cache[@]}"} >"$tmp" 2>&1
    rc=$?
    mv -f -T -- "$tmp" postmortem.log || rm -f -- "$tmp"
    printf '%s\n' "$rc" | put exit_code
    case $rc in
        0) what="no finding at or above $POSTMORTEM_FAIL_ON" ;;
        1) what="findings at or above $POSTMORTEM_FAIL_ON" ;;
        2) what="nothing readable in $job_dir, or the report could not be written (see postmortem.log)" ;;
        3) what="partial report: a rule failed (see postmortem.log)" ;;
        124 | 137 | 143) what="stopped after ${POSTMORTEM_TIMEOUT}s (raise POSTMORTEM_TIMEOUT)" ;;
        *) what="postmortem failed (see postmortem.log)" ;;
    esac
    log "job $job_id: exit $rc, $what, $(($(date +%s) - started))s, report in $out"
    return 0
}

if [ "${SLURM_SCRIPT_CONTEXT:-}" = epilog_slurmctld ] && [ -z "${POSTMORTEM_DETACHED:-}" ]; then
    # Detach (a new session, so slurmctld's script thread returns now and does not wait on or kill
    # the analysis); the copy runs the report at low priority under its own timeout.
    POSTMORTEM_DETACHED=1 setsid "$0" "$job_id" "$job_dir" </dev/null >/dev/null 2>&1 &
    exit 0
fi
run_report
exit 0
