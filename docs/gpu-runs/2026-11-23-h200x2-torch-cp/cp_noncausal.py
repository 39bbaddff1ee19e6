"""TORCH-CP-NON-CAUSAL-LOAD-BALANCE on real GPUs: torch's context_parallel() ring attention with
is_causal False and True, with the default load balancing and with it turned off.

Run with `torchrun --nproc-per-node 2 cp_noncausal.py OUT.json` on a machine with 2 GPUs.
Each case runs one SDPA forward + backward inside context_parallel(); rank 0 writes, per case,
whether it ran and the exception text if not, plus the torch version and GPU name.
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

try:  # the module moved into _context_parallel in torch 2.10; both export _cp_options
    from torch.distributed.tensor.experimental import _attention as cp_attn
except ImportError:  # pragma: no cover
    cp_attn = None
from torch.distributed.tensor.experimental import context_parallel


def one(mesh, causal: bool, balance: bool) -> dict:
    cp_attn._cp_options.enable_load_balance = balance
    torch.manual_seed(0)
    dev = torch.device("cuda", torch.cuda.current_device())
    b, h, s, d = 1, 4, 1024, 64
    # context_parallel() shards its buffers in place (and restores them on exit), so they must not
    # require grad; leaves made from the shards stand for a model's q/k/v projections
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    try:
        with context_parallel(mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2]):
            ql, kl, vl = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(ql, kl, vl, is_causal=causal)
            out.float().sum().backward()
        torch.cuda.synchronize()
        return {"is_causal": causal, "enable_load_balance": balance, "ran": True}
    except Exception as exc:  # the outcome is the data
        return {"is_causal": causal, "enable_load_balance": balance, "ran": False,
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),), mesh_dim_names=("cp",))
    default = bool(cp_attn._cp_options.enable_load_balance)
    results = [one(mesh["cp"], c, lb) for c in (False, True) for lb in (True, False)]
    if rank == 0:
        doc = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "world_size": dist.get_world_size(),
               "default_enable_load_balance": default, "cases": results}
        with open(sys.argv[1], "w") as fh:
            json.dump(doc, fh, indent=1)
        print(json.dumps(doc, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
