#!/usr/bin/env bash
# Device call: ncu on our forward kernel and torch's flash forward for one grid shape (default fp16
# D128 N16k non-causal): throughput, memory (L2 hit rate, DRAM bytes), stalls, SM clock.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
D=.devbin/x; [ -f $D/bwd_check.xz ] && xz -dkf $D/bwd_check.xz && chmod +x $D/bwd_check
read -r HD N C <<< "${PROF_SHAPE:-128 16384 0}"
MET="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy --metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
timeout 150 ncu --clock-control none -k regex:fwd_kernel --launch-count 1 $MET $D/bwd_check --prof $HD $N $C > "$OUT/ncu_fwd_ours.txt" 2>&1; echo "ours rc=$?"
timeout 150 ncu --clock-control none -k regex:flash_fwd --launch-skip 2 --launch-count 1 $MET python3 scripts/prof_torch.py $HD $N $C fwd 3 > "$OUT/ncu_fwd_torch.txt" 2>&1; echo "torch rc=$?"
for f in ours torch; do echo "-- $f"; grep -E "^\s+(Duration|SM Frequency|Memory Throughput|Compute \(SM\) Throughput|L2 Hit Rate|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Block Size|Grid Size|Dynamic Shared Memory Per Block|Warp Cycles Per Issued|lts__t_sector_hit_rate|dram__bytes_read|dram__bytes_write|sm__cycles_elapsed.avg.per_second|smsp__inst_executed.sum|l1tex__data_bank|smsp__average_warps_issue_stalled_(barrier|long_scoreboard|short_scoreboard|mio_throttle|math_pipe_throttle|wait|not_selected|lg_throttle|dispatch_stall|no_instruction)_per)" "$OUT/ncu_fwd_$f.txt" | awk '{$1=$1; print}'; done
