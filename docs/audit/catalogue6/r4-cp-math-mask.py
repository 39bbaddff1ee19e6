import sys, torch, torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.attention import sdpa_kernel, SDPBackend
try:
    from torch.distributed.tensor.experimental import context_parallel
except ImportError:
    from torch.distributed.tensor.experimental._attention import context_parallel

def main():
    dist.init_process_group("gloo")
    r = dist.get_rank()
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    B, H, S, D = 1, 2, 16, 8
    q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
    mask = torch.ones(B, 1, S, S, dtype=torch.bool).tril()
    mask[..., :, :3] = False  # left padding of 3 keys
    mask[..., :3, :] = True   # keep padded rows finite
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    mode = sys.argv[1]
    if len(sys.argv) > 2:
        from torch.distributed.tensor.experimental._attention import _cp_options
        _cp_options.enable_load_balance = False
    refc = ref.clone()
    buffers = [q, k, v, refc] + ([mask] if mode == "mask_buf" else [])
    dims = [2, 2, 2, 2] + ([2] if mode == "mask_buf" else [])
    try:
        with sdpa_kernel(SDPBackend.MATH), context_parallel(mesh, buffers=buffers, buffer_seq_dims=dims):
            if mode == "causal":
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                refc.copy_(refc)  # ref below is for the mask; causal compares to its own ref
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            err = (out.to_local() if hasattr(out, "to_local") else out) - refc
            print(r, "max abs err vs unsharded", float(err.abs().max()))
        full = [torch.empty_like(out) for _ in range(2)]
        dist.all_gather(full, out.contiguous())
        if r == 0:
            print(mode, "ran; out shape", tuple(out.shape), type(out).__name__)
    except Exception as e:
        if r == 0:
            print(mode, "raised", type(e).__name__, str(e)[:300])
    dist.destroy_process_group()

main()
