#!/usr/bin/env bash
# Runs each libFuzzer target in fuzz/ for a bounded time, from the seeds
# write_seeds makes plus whatever corpus earlier runs in this build kept.
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET
# Exits non-zero on the first finding; the input that caused it is left in
# BUILD_DIR/findings/ (reproduce with: BUILD_DIR/<target> <that file>).
set -euo pipefail
build=$1
seconds=$2
targets=(control_wire_fuzzer store_protocol_fuzzer store_server_fuzzer segment_header_fuzzer
         segment_record_fuzzer control_frames_fuzzer control_hello_fuzzer shm_ring_fuzzer)

for target in "${targets[@]}"; do mkdir -p "$build/corpus/$target"; done
mkdir -p "$build/findings"
"$build/write_seeds" "$build/corpus"
for target in "${targets[@]}"; do
  echo "fuzz: $target for ${seconds} s"
  log="$build/findings/$target.log"
  # -timeout: one input that takes over 10 s is a hang, and a finding.
  if ! "$build/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$build/findings/$target-" -print_final_stats=1 \
        "$build/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz: $target found a failing input; see $build/findings/" >&2
    exit 1
  fi
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)' "$log" | sed "s/^/fuzz: $target: /"
  echo "fuzz: $target: corpus of $(ls "$build/corpus/$target" | wc -l) inputs, no finding"
done
