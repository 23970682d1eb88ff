#!/usr/bin/env bash
# Device call for backward tuning: ncu on our main kernel and on torch's flash backward for the same
# grid shapes, SASS opcode counts, and the tuning build's variant timings. Logs in $OUT.
# Needs .devbin/bwd_check (FA_BUILD_TOOLS build) and .devbin/bwd_tune (-DFA_TUNE) from this tree.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
D=${BIN_DIR:-.devbin/x}; BC=$D/bwd_check; BT=$D/bwd_tune; FC=$D/fwd_check
for f in $BC $BT $FC; do [ -f $f.xz ] && xz -dkf $f.xz; chmod +x $f 2>/dev/null; done
SHAPES=${PROF_SHAPES:-"128 16384 0;256 4096 0;64 8192 0"}
MET="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,lts__t_sectors_op_red.sum,lts__t_requests_op_red.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg"
IFS=';' read -ra SH <<< "$SHAPES"
for s in "${SH[@]}"; do
  read -r D N C <<< "$s"
  echo "=== ncu ours D$D N$N c$C $(el)"
  timeout 120 ncu --clock-control none -k regex:bwd_main_kernel --launch-skip 3 --launch-count 1 $MET $BC --prof $D $N $C >> "$OUT/ncu_ours.txt" 2>&1 || echo "ncu ours rc=$?"
  echo "=== ncu torch D$D N$N c$C $(el)"
  timeout 120 ncu --clock-control none -k regex:flash_bwd_dq_dk_dv --launch-skip 2 --launch-count 1 $MET python3 scripts/prof_torch.py $D $N $C bwd 3 >> "$OUT/ncu_torch.txt" 2>&1 || echo "ncu torch rc=$?"
done
echo "=== sass $(el)"
cuobjdump -sass $BC > /tmp/sass.txt 2>/dev/null
awk '/Function : /{name=$3; keep=(name ~ /bwd_main_kernel/ && name ~ /Lb1E/)} keep && match($0, /\/\*[0-9a-f]{4}\*\/ +[A-Z0-9_.]+/) {split(substr($0, RSTART, RLENGTH), a, " "); cnt[name" "a[2]]++} END {for (k in cnt) print cnt[k], k}' /tmp/sass.txt | sort -k2,2 -k1,1nr | awk '{if ($2 != last) {n=0; last=$2; print "--", $2} if (n++ < 30) print "  ", $1, $3}' > "$OUT/sass_bwd.txt"
grep -c "" "$OUT/sass_bwd.txt"
echo "=== tune $(el)"
$BT --bench-only ${TUNE_ARGS:-} > "$OUT/tune.log" 2>&1; echo "tune rc=$? $(el)"
grep -E "variants|TFLOP|FAIL" "$OUT/tune.log" | sed 's/fa::cuda::BwdTraits<__half, //' | tail -120
if [ -x $FC ]; then
  echo "=== forward: rotated key loop (FA_FWD_ROTATE=1) check + D128 timing both ways $(el)"
  FA_FWD_ROTATE=1 $FC --check-only --cases ${FWD_CASES:-80} > "$OUT/fwd_check_rot.log" 2>&1; echo "fwd check (rotate) rc=$?"
  grep -E "correctness|FAIL" "$OUT/fwd_check_rot.log" | head -5
  for r in 0 1; do FA_FWD_ROTATE=$r $FC --bench-only --width 128 --reps 20 > "$OUT/fwd_rot$r.log" 2>&1; done
  paste <(grep -E "^ +(fp16|bf16)" "$OUT/fwd_rot0.log") <(grep -E "^ +(fp16|bf16)" "$OUT/fwd_rot1.log" | awk '{print "| rot:", $6, $8}')
fi
echo "=== ncu summary (ours / torch): duration, stalls"
for f in ncu_ours ncu_torch; do echo "-- $f"; grep -E "^\s+(Duration|Executed Ipc Active|Issue Slots Busy|Warp Cycles Per Issued|smsp__average_warps_issue_stalled_(barrier|long_scoreboard|short_scoreboard|mio_throttle|math_pipe_throttle|wait|not_selected|lg_throttle|membar|dispatch_stall|no_instruction|selected|tex_throttle)_per|smsp__inst_executed.sum|l1tex__data_bank_conflicts|lts__t_sectors_op_red)" "$OUT/$f.txt" | awk '{$1=$1; print}' | head -80; done
echo "total $(el)"
