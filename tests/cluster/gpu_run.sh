#!/usr/bin/env bash
# The multi-GPU run whose results are committed under docs/gpu-runs/ (docs/cluster.md).
# Run from the repository root on one node with >= 2 GPUs:  OUT=/some/dir tests/cluster/gpu_run.sh
#   cluster.json          probe + NCCL smoke test + CP attention on every rank
#   cluster-hetero.json   the same with NVTE_FLASH_ATTN / NCCL_DEBUG set on local rank 1 only
#   cluster-exit.json     rank 1 dies in its probe: torchrun stops the job, rank 0 still reports
#   cluster-hang.json     rank 1 hangs in its probe (plain launch): rank 0 reports after 10 s
#   cluster-kernels.json  the full check with each rank's kernel cases on its own GPU (last:
#                         the longest, so a slow kernel stage cannot cost the results above)
# Every step has a hard cap (timeout) so the whole script ends within six minutes.
set -u
PY=${PY:-python3}
NPROC=${NPROC:-2}
OUT=${OUT:?set OUT to a folder}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TR="$PY -m torch.distributed.run --nproc-per-node $NPROC --master-addr 127.0.0.1"

echo "== environment"; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1 | head -9
nvidia-smi topo -m 2>&1 | head -6
$PY -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.device_count(), torch.cuda.nccl.version() if torch.cuda.is_available() else None)'

echo "== 1. probe + comm + CP on every rank"
timeout 90 $TR --master-port 29701 -m doctor.cluster --no-kernels --timeout 60 --out "$OUT/cluster.json"; echo "exit $?"

echo "== 2. heterogeneous rank"
timeout 60 $TR --master-port 29702 --no-python bash -c \
  'if [ "$LOCAL_RANK" = 1 ]; then export NVTE_FLASH_ATTN=0 NCCL_DEBUG=WARN; fi; exec '"$PY"' -m doctor.cluster --no-kernels --static --timeout 40 --out "$0"' \
  "$OUT/cluster-hetero.json"; echo "exit $?"

echo "== 3. a rank that dies (torchrun)"
ATTN_DOCTOR_TEST_MODE_1=exit ATTN_DOCTOR_TEST_TIMEOUTS=30,30,30 \
  timeout 45 $TR --master-port 29703 tests/cluster/rank_main.py "$OUT/cluster-exit.json"; echo "exit $?"

echo "== 4. a rank that hangs (plain launch)"
pids=""
for r in $(seq 0 $((NPROC - 1))); do
  RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29704 \
  ATTN_DOCTOR_TEST_MODE_1=hang ATTN_DOCTOR_TEST_TIMEOUTS=30,10,30 \
  timeout 45 $PY tests/cluster/rank_main.py "$OUT/cluster-hang.json" & pids="$pids $!"
done
for p in $pids; do wait $p; echo "exit $?"; done

echo "== 5. full check with kernel cases"
timeout 100 $TR --master-port 29705 -m doctor.cluster --timeout 40 --out "$OUT/cluster-kernels.json"; echo "exit $?"
