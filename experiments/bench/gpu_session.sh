#!/usr/bin/env bash
# One device session's GPU checks of the captured training step (cuda_graphs), in parts, each with its own
# time limit so that the others still run:
#   step:    experiments/bench/gpu_step.py: eager vs captured nplm-train vs a plain captured loop (~4 min);
#   capture: pytest tests/test_capture.py's CUDA tests (every registered model x head captured, replayed
#            under torch.cuda.set_sync_debug_mode("error"), against the eager step) (~1.5 min);
#   check:   experiments/bench/gpu_check.py --skip-tests --no-compile: every model x head x precision
#            through nplm-train with cuda_graphs=true and NPLM_SYNC_DEBUG=1, each run must replay its
#            captured step (~4 min);
#   profile: experiments/bench/gpu_profile.py at the WikiText-103 shape (top kernels by CUDA time) (~1 min);
#   profile_brown: the same for experiment=sun2021/brown at batch 4,096 (~1 min);
#   profile_compiled: brown at batch 256 with the loss compiled (compile=true's kernels, how many a step) (~1.5 min);
#   profile_compiled_wt103: the WikiText-103 shape with the loss compiled: where the 27.5% of the bf16 rate goes (~2 min);
#   alignment: experiments/bench/gpu_alignment.py, the recipe's matmul widths against rounded ones (~20 s);
#   wt103:   gpu_step.py at the WikiText-103 shape alone (~1.5 min);
#   compile: gpu_step.py on brown at batch 256 and 4,096 (COMPILE_BATCHES): eager, captured, and compile=true
#            captured, compile=true with 64 batches a Lightning step, and compile=true with head.training_path=all
#            (COMPILE_PATHS; add compiled-reduce-overhead for torch.compile's own graphs) (~5 min);
#   compile_wt103: gpu_step.py at the WikiText-103 shape, captured and compile=true captured (~3 min);
#   compile_capture: gpu_compile_capture.py, the plain captured loop with and without inductor's loss (~3 min);
#   candidates: gpu_compile_capture.py at batch 256, inductor against its candidates (CANDIDATES: head-all,
#            combo-kernels; add "inductor, max-autotune", minutes of compiling) (~2 min);
#   profile_train: gpu_profile_train.py, nplm-train at brown batch 256 with compile=true under torch.profiler:
#            the device's busy share of the wall time, kernels outside the graph, host waits and the stacks of
#            any sync; then the plain captured loop profiled alike, the kernels a step one runs and the other not (~2.5 min);
#   host:    host_step.py --device cuda, nplm-train's host work per step with the step left out (~1 min).
#
#   experiments/bench/gpu_session.sh [COMMIT] [PARTS]
#
# COMMIT (default $NPLM_GIT_COMMIT, else unknown): the commit checked (the device copy has no .git).
# PARTS (default step,capture,check): comma-separated, run in that order.
# Missing Python packages (hydra-core, omegaconf, antlr4-python3-runtime, nltk) are installed from .whl/
# when present (experiments/device_env.sh).
# Results go to $OUT (the device machine's) or outputs/gpu_session: gpu_step.json, gpu_step.md,
# test_capture.txt, gpu_check.md and each part's log.
set -u -o pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
export NPLM_GIT_COMMIT=${1:-${NPLM_GIT_COMMIT:-unknown}}
DEST=${OUT:-outputs/gpu_session}
mkdir -p "$DEST"
source experiments/device_env.sh "${1:-}"  # a stale .git hidden, the wheels, PYTHONPATH
export OMP_NUM_THREADS=4
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee "$DEST/card.txt"

PARTS=${2:-step,capture,check}
python3 -c "import torch, pytorch_lightning as pl; print('torch', torch.__version__, 'pytorch_lightning', pl.__version__)"
for part in ${PARTS//,/ }; do
  case $part in
    step)
      timeout 260 python3 experiments/bench/gpu_step.py --out "$DEST" > "$DEST/gpu_step.txt" 2>&1
      echo "gpu_step: exit $? after $(( $(date +%s) - START )) s"
      cat "$DEST/gpu_step.md" 2>/dev/null; grep -E "error|Error" "$DEST/gpu_step.txt" | tail -n 8 ;;
    capture)
      timeout 110 python3 -m pytest -q -rfs --tb=short tests/test_capture.py tests/test_aligned.py -k cuda 2>&1 | tail -n 80 > "$DEST/test_capture.txt"
      echo "test_capture: exit ${PIPESTATUS[0]} after $(( $(date +%s) - START )) s"; tail -n 25 "$DEST/test_capture.txt" ;;
    check)
      timeout 230 python3 experiments/bench/gpu_check.py --skip-tests --no-compile --steps 60 --commit "$NPLM_GIT_COMMIT" \
        --out "$DEST/gpu_check.md" > "$DEST/gpu_check.txt" 2>&1
      echo "gpu_check: exit $? after $(( $(date +%s) - START )) s"; grep -E "^\| " "$DEST/gpu_check.txt" | tail -n 50 ;;
    wt103)
      timeout 150 python3 experiments/bench/gpu_step.py --shapes wikitext103 --out "$DEST/wt103" > "$DEST/gpu_step_wt103.txt" 2>&1
      echo "gpu_step wikitext103: exit $? after $(( $(date +%s) - START )) s"; cat "$DEST/wt103/gpu_step.md" 2>/dev/null
      grep -E "error|Error" "$DEST/gpu_step_wt103.txt" | tail -n 8 ;;
    profile)
      timeout 100 python3 experiments/bench/gpu_profile.py --shape wikitext103 > "$DEST/gpu_profile.txt" 2>&1
      echo "gpu_profile: exit $? after $(( $(date +%s) - START )) s"; head -n 40 "$DEST/gpu_profile.txt" | cut -c1-200 ;;
    profile_brown)  # the brown recipe's step at batch 4,096, eager
      timeout 100 python3 experiments/bench/gpu_profile.py --shape brown --batch 4096 > "$DEST/gpu_profile_brown.txt" 2>&1
      echo "gpu_profile brown: exit $? after $(( $(date +%s) - START )) s"; head -n 40 "$DEST/gpu_profile_brown.txt" | cut -c1-200 ;;
    profile_compiled)  # the brown recipe's step at batch 256, the loss compiled as compile=true compiles it
      timeout 150 python3 experiments/bench/gpu_profile.py --shape brown --batch 256 --compile > "$DEST/gpu_profile_compiled.txt" 2>&1
      echo "gpu_profile brown compiled: exit $? after $(( $(date +%s) - START )) s"; head -n 40 "$DEST/gpu_profile_compiled.txt" | cut -c1-200 ;;
    profile_compiled_wt103)  # the WikiText-103 shape, the loss compiled as compile=true compiles it
      timeout 200 python3 experiments/bench/gpu_profile.py --shape wikitext103 --compile > "$DEST/gpu_profile_compiled_wt103.txt" 2>&1
      echo "gpu_profile wikitext103 compiled: exit $? after $(( $(date +%s) - START )) s"
      head -n 40 "$DEST/gpu_profile_compiled_wt103.txt" | cut -c1-200 ;;
    alignment)
      timeout 60 python3 experiments/bench/gpu_alignment.py > "$DEST/gpu_alignment.txt" 2>&1
      echo "gpu_alignment: exit $? after $(( $(date +%s) - START )) s"; cat "$DEST/gpu_alignment.txt" ;;
    compile)
      timeout 300 python3 experiments/bench/gpu_step.py --shapes brown --batches "${COMPILE_BATCHES:-256,4096}" \
        --paths "${COMPILE_PATHS:-eager,captured,compiled,compiled-s64,compiled-head-all}" --out "$DEST/compile" \
        > "$DEST/gpu_step_compile.txt" 2>&1
      echo "gpu_step --compile: exit $? after $(( $(date +%s) - START )) s"; cat "$DEST/compile/gpu_step.md" 2>/dev/null
      grep -E "error|Error" "$DEST/gpu_step_compile.txt" | tail -n 8 ;;
    compile_wt103)  # the WikiText-103 shape, captured with and without compile=true
      timeout 280 python3 experiments/bench/gpu_step.py --shapes wikitext103 --paths captured,compiled --out "$DEST/compile_wt103" \
        > "$DEST/gpu_step_compile_wt103.txt" 2>&1
      echo "gpu_step wikitext103 --paths captured,compiled: exit $? after $(( $(date +%s) - START )) s"
      cat "$DEST/compile_wt103/gpu_step.md" 2>/dev/null; grep -E "error|Error" "$DEST/gpu_step_compile_wt103.txt" | tail -n 8 ;;
    compile_capture)
      timeout 280 python3 experiments/bench/gpu_compile_capture.py --out "$DEST/compile_capture" > "$DEST/gpu_compile_capture.txt" 2>&1
      echo "gpu_compile_capture: exit $? after $(( $(date +%s) - START )) s"; cat "$DEST/compile_capture/gpu_compile_capture.md" 2>/dev/null ;;
    candidates)
      timeout 280 python3 experiments/bench/gpu_compile_capture.py --batches 256 --out "$DEST/candidates" \
        --variants "${CANDIDATES:-inductor;inductor, head-all;inductor, combo-kernels}" > "$DEST/gpu_candidates.txt" 2>&1
      echo "gpu_compile_capture candidates: exit $? after $(( $(date +%s) - START )) s"
      cat "$DEST/candidates/gpu_compile_capture.md" 2>/dev/null ;;
    profile_train)
      timeout 220 python3 experiments/bench/gpu_profile_train.py --batch 256 --compile --reference > "$DEST/gpu_profile_train.txt" 2>&1
      echo "gpu_profile_train: exit $? after $(( $(date +%s) - START )) s"; head -n 30 "$DEST/gpu_profile_train.txt" | cut -c1-240 ;;
    host)
      timeout 150 python3 experiments/bench/host_step.py --device cuda --rounds 1 --variants default,no,steps_per_execution=64 \
        --out "$DEST/host" > "$DEST/host_step.txt" 2>&1
      echo "host_step: exit $? after $(( $(date +%s) - START )) s"; cat "$DEST/host/host_step.md" 2>/dev/null ;;
    *) echo "gpu_session.sh: part $part: unknown; parts are step, capture, check, wt103, profile, profile_brown, profile_compiled, profile_compiled_wt103, alignment, compile, compile_wt103, compile_capture, candidates, profile_train, host"; exit 2 ;;
  esac
done
echo "gpu_session.sh: done after $(( $(date +%s) - START )) s"
