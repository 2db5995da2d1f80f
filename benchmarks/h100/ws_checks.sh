#!/usr/bin/env bash
# The warp-specialized GEMM's GPU checks (issue 19), run on the H100 from the repository root:
# compute-sanitizer racecheck and synccheck on the compiled kernel, then each agents mutation
# emitted anyway (its checker finding first) and run with the mbarrier watchdog.
# Usage: bash benchmarks/h100/ws_checks.sh [extra ws_gemm.py args]
set -u
export PYTHONPATH=$PWD:$PWD/plugins/nvidia_h100:$PWD/plugins/amd_mi355x
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck synccheck; do
  echo "== compute-sanitizer --tool $tool, ws-s4 at 256^3"
  timeout 300 "$SAN" --tool "$tool" python benchmarks/ws_gemm.py --size 256 --config ws-s4 --repeats 1 "$@" 2>&1 | tail -4
  echo "== compute-sanitizer --tool $tool, ws-s4 persistent: 3 CTAs over 8 output tiles (512^3)"
  timeout 300 "$SAN" --tool "$tool" python benchmarks/ws_gemm.py --size 512 --config ws-s4 --ctas 3 --repeats 1 "$@" 2>&1 | tail -4
done
for config in ws-s4 ws-s2; do
  for m in loosen-wgmma-wait early-parity drop-acquire drop-release; do
    echo "== $config mutation $m"
    timeout 60 python benchmarks/ws_gemm.py --size 2048 --config "$config" --mutate "$m" \
      --watchdog 2000000 --repeats 10 --allow-unsafe 2>&1 | tail -4
    echo "exit ${PIPESTATUS[0]}"
  done
done
