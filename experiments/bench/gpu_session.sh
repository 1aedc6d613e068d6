#!/usr/bin/env bash
# The GPU checks and measurements for a CUDA machine borrowed for a few minutes, in parts, each with its
# own time limit so that the others still run:
#   step:          gpu_step.py: nplm-train eager and captured against a plain captured loop, brown at batch 256,
#                  1,024 and 4,096 and the WikiText-103 shape (~4 min);
#   compile:       gpu_step.py on brown at COMPILE_BATCHES (default 256,4096) with COMPILE_PATHS (default eager,
#                  captured,compiled; also compiled-reduce-overhead, compiled-s64, compiled-head-all), its result
#                  file gpu_step-compile.json (~3 min);
#   wt103:         gpu_step.py at the WikiText-103 shape, captured and compile=true captured, its result file
#                  gpu_step-wt103.json (~3 min);
#   successors_step: gpu_step.py, the NPLM's brown shape at batch 256 beside the LSTM (eager; 20 and 128
#                  streams), the Transformer and Transformer-N (eager and captured; 32 and 256 blocks), its
#                  result file gpu_step-successors.json (~4 min);
#   capture:       pytest's CUDA tests of the captured step and the aligned layers (every model x head captured,
#                  replayed under sync debug mode "error", against the eager step) (~1.5 min);
#   check:         gpu_check.py --skip-tests --no-compile: every model x head x precision through nplm-train with
#                  cuda_graphs=true and sync_debug=true, each run must replay its captured step (~4 min);
#   successors:    the same for the LSTM, the Transformer and Transformer-N (the LSTM trains eagerly: the capture
#                  refuses a model that carries its state), its result file gpu_check-successors.json (~4 min);
#   profile:       gpu_profile_train.py at the WikiText-103 shape with compile=true: the device's busy share and
#                  the top kernels by device time (~2 min);
#   profile_train: gpu_profile_train.py, brown at batch 256 with compile=true, against the plain captured loop
#                  profiled alike, with the sync watch (~2.5 min);
#   profile_eager: gpu_profile_train.py, brown at batch 256 uncaptured (cuda_graphs=false): the host's time
#                  and waits a step, the host operators by CPU time and every host-device sync with its
#                  stack, its result file gpu_profile_train-eager.json (~2 min).
#
#   experiments/bench/gpu_session.sh [--dry-run] [--parallel] [PARTS]
#
# PARTS (default step,capture,check): comma-separated, run in that order. --parallel runs them all at once (the
# checks, which measure nothing, in the time of the longest; the check parts' tables then say their tokens/s are
# not speeds; refused with the parts that measure speed: step, compile, wt103, successors_step and the
# profiles). --dry-run checks every part on a CPU without a GPU: the scripts' dry runs (each run's config
# composed and checked), pytest collecting the CUDA tests.
# The commit recorded is the checkout's; a copy without its .git (or with an older .git than its files)
# records the commit of its PROVENANCE.json, checked against its files (`python -m nplm.tracking.provenance
# write` in the clean checkout it is sent from; the file is git-ignored: send it with the tree), else
# "unknown" (nplm.tracking.provenance).
# Results go to $OUT (if set) or outputs/gpu_session: each part's log, and the scripts' result files under
# <part>/<card>/<script>.json (copy the ones to keep into experiments/bench/results/<card>/, then run
# `python experiments/bench/harness.py` to rewrite the bench README's tables).
set -u -o pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
DRY=""
PAR=""
while case ${1:-} in --dry-run) DRY=1 ;; --parallel) PAR=1 ;; *) false ;; esac; do shift; done
PARTS=${1:-step,capture,check}
PART_NAMES="step compile wt103 successors_step capture check successors profile profile_train profile_eager"
CHECK_PARTS="capture check successors"  # the parts that measure no speed; every other part does
for part in ${PARTS//,/ }; do  # every part named is known before anything runs
  case " $PART_NAMES " in
    *" $part "*) ;;
    *) echo "gpu_session.sh: part $part: unknown; parts are ${PART_NAMES// /, }"; exit 2 ;;
  esac
  case " $CHECK_PARTS " in
    *" $part "*) ;;
    *) [ -n "$PAR" ] && { echo "gpu_session.sh: --parallel with part $part, which measures speed:" \
                           "run it on its own (without --parallel)"; exit 2; } ;;
  esac
done
DEST=${OUT:-outputs/gpu_session}
mkdir -p "$DEST"
source experiments/device_env.sh  # the wheels, PYTHONPATH
export OMP_NUM_THREADS=4
PY=${PYTHON:-python3}

run() {  # run PART LIMIT ARGS...: one script of a part, its log in $DEST/PART.txt, its results in $DEST/PART
  local part=$1 limit=$2 script=$3; shift 3
  if [ -n "$DRY" ]; then
    case $script in
      gpu_profile_train.py) set -- "$@" --dry-run --device cpu ;;
      *) set -- "$@" --dry-run ;;
    esac
  fi
  timeout "$limit" "$PY" "experiments/bench/$script" "$@" --out "$DEST/$part" > "$DEST/$part.txt" 2>&1
  local rc=$?
  echo "$part ($script): exit $rc after $(( $(date +%s) - START )) s"
  tail -n 30 "$DEST/$part.txt" | cut -c1-240
  return $rc
}

[ -z "$DRY" ] && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee "$DEST/card.txt"
"$PY" -c "from importlib.metadata import version as v; print('torch', v('torch'), 'pytorch_lightning', v('pytorch-lightning'))"
part_run() {  # part_run PART: one part, its exit status
  case $1 in
    step) run step 260 gpu_step.py ;;
    compile) run compile 300 gpu_step.py --shapes brown --batches "${COMPILE_BATCHES:-256,4096}" \
               --paths "${COMPILE_PATHS:-eager,captured,compiled}" --part compile ;;
    successors_step) run successors_step 300 gpu_step.py --shapes brown,brown-lstm,brown-transformer,brown-transformer_n \
                       --batches 256 --part successors ;;
    wt103) run wt103 280 gpu_step.py --shapes wikitext103 --paths captured,compiled --part wt103 ;;
    capture)
      collect=${DRY:+--collect-only}
      timeout 240 "$PY" -m pytest -q -rfs --tb=short ${collect} tests/test_capture.py tests/test_aligned.py -k cuda \
        > "$DEST/capture.txt" 2>&1
      rc=$?; echo "capture (pytest -k cuda): exit $rc after $(( $(date +%s) - START )) s"; tail -n 25 "$DEST/capture.txt"
      [ "$rc" = 0 ] ;;
    check) run check 360 gpu_check.py --skip-tests --no-compile --steps 60 --models nplm,lbl,modern "${BESIDE[@]}" ;;
    successors) run successors 360 gpu_check.py --skip-tests --no-compile --steps 60 --models lstm,transformer,transformer_n \
                  --part successors "${BESIDE[@]}" ;;
    profile) run profile 200 gpu_profile_train.py --shape wikitext103 --compile --groups 4 --watch 2 ;;
    profile_train) run profile_train 220 gpu_profile_train.py --batch 256 --compile --reference ;;
    profile_eager) run profile_eager 200 gpu_profile_train.py --batch 256 --eager --groups 8 --watch 2 --part eager ;;
  esac
}
failed=0
BESIDE=()
if [ -n "$PAR" ]; then  # every part at once; the checks' tokens/s are then not speeds, and their tables say so
  BESIDE=(--note "Ran at the same time as the parts ${PARTS//,/, } on the same GPU: its tokens/s are not speeds.")
  pids=()
  for part in ${PARTS//,/ }; do part_run "$part" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
else
  for part in ${PARTS//,/ }; do part_run "$part" || failed=$((failed + 1)); done
fi
echo "gpu_session.sh: done after $(( $(date +%s) - START )) s, $failed part(s) failed"
[ "$failed" = 0 ]
