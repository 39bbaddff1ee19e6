#!/usr/bin/env bash
# The multi-GPU run whose results are committed under docs/gpu-runs/ (docs/cluster.md).
# Run from the repository root on one node with >= 2 GPUs:  OUT=/some/dir tests/cluster/gpu_run.sh
#   cluster.json         the real check: probe + kernel cases + NCCL smoke test + CP attention
#   cluster-hetero.json  the same with NVTE_FLASH_ATTN / NCCL_DEBUG set on local rank 1 only
#   cluster-exit.json    rank 1 dies in its probe: torchrun stops the job, rank 0 still reports
#   cluster-hang.json    rank 1 hangs in its probe (plain launch): rank 0 reports after 10 s
set -u
PY=${PY:-python3}
NPROC=${NPROC:-2}
OUT=${OUT:?set OUT to a folder}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TR="$PY -m torch.distributed.run --nproc-per-node $NPROC --master-addr 127.0.0.1"

echo "== environment"; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1 | head -9
$PY -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.device_count())'

echo "== 1. full check"
timeout 200 $TR --master-port 29701 -m doctor.cluster --out "$OUT/cluster.json" --timeout 150; echo "exit $?"

echo "== 2. heterogeneous rank"
timeout 60 $TR --master-port 29702 --no-python bash -c \
  'if [ "$LOCAL_RANK" = 1 ]; then export NVTE_FLASH_ATTN=0 NCCL_DEBUG=WARN; fi; exec '"$PY"' -m doctor.cluster --no-kernels --static --timeout 40 --out "$0"' \
  "$OUT/cluster-hetero.json"; echo "exit $?"

echo "== 3. a rank that dies (torchrun)"
ATTN_DOCTOR_TEST_MODE_1=exit ATTN_DOCTOR_TEST_TIMEOUTS=30,30,30 \
  timeout 45 $TR --master-port 29703 tests/cluster/rank_main.py "$OUT/cluster-exit.json"; echo "exit $?"

echo "== 4. a rank that hangs (plain launch)"
for r in $(seq 0 $((NPROC - 1))); do
  RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29704 \
  ATTN_DOCTOR_TEST_MODE_1=hang ATTN_DOCTOR_TEST_TIMEOUTS=30,10,30 \
  timeout 50 $PY tests/cluster/rank_main.py "$OUT/cluster-hang.json" & pids="${pids:-} $!"
done
for p in $pids; do wait $p; echo "exit $?"; done
