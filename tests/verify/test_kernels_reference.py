"""The reference math and the judge: masks, float64 attention, error budget, poison."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")


def spec(**kw):
    base = dict(id="t/x", backend="sdpa.math", dtype="bf16", batch=2, heads_q=4, heads_kv=4,
                seq_q=32, seq_kv=32, head_dim_qk=32, head_dim_v=32, mask="causal", window=None,
                softcap=0.0, dropout=0.0, layout="bshd", direction="fwdbwd", seed=0)
    base.update(kw)
    return base


def test_masks_top_left_bottom_right_and_window(kref) -> None:
    tl = kref.allowed(2, 4, "causal", None)
    br = kref.allowed(2, 4, "causal_bottom_right", None)
    assert tl.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert br.tolist() == [[True, True, True, False], [True, True, True, True]]
    win = kref.allowed(4, 4, "causal", (1, 0))  # each query sees itself and one key back
    assert win.int().sum(dim=1).tolist() == [1, 2, 2, 2]
    assert kref.allowed(3, 3, "no_mask", None).all()


def test_float64_reference_matches_torch_sdpa_math(kref) -> None:
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 16, 8, 32, generator=g, dtype=torch.float64)
    k = torch.randn(2, 24, 2, 32, generator=g, dtype=torch.float64)
    v = torch.randn(2, 24, 2, 16, generator=g, dtype=torch.float64)
    ok = kref.allowed(16, 24, "causal", None)
    mine = kref.naive_attention(q, k, v, ok)
    theirs = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                            v.transpose(1, 2), attn_mask=ok,
                                            enable_gqa=True).transpose(1, 2)
    assert torch.allclose(mine, theirs, atol=1e-12)


def test_softcap_is_applied_before_the_mask(kref) -> None:
    q = torch.full((1, 1, 1, 4), 10.0, dtype=torch.float64)
    k = torch.tensor([[[[10.0] * 4]], [[[-10.0] * 4]]], dtype=torch.float64).view(1, 2, 1, 4)
    v = torch.tensor([[1.0], [0.0]], dtype=torch.float64).view(1, 2, 1, 1)
    ok = kref.allowed(1, 2, "no_mask", None)
    out = kref.naive_attention(q, k, v, ok, softcap=5.0)
    s = 5.0 * math.tanh(200.0 / 2.0 / 5.0)  # score q.k / sqrt(4), capped
    want = math.exp(s) / (math.exp(s) + math.exp(-s))
    assert out.item() == pytest.approx(want, rel=1e-12)


def test_inputs_are_random_deterministic_and_never_zero(kref) -> None:
    a = kref.make_inputs(spec(), torch.device("cpu"))
    b = kref.make_inputs(spec(), torch.device("cpu"))
    assert torch.equal(a.q, b.q) and torch.equal(a.dout, b.dout)
    assert (a.q != 0).float().mean() > 0.99 and a.q.std() > 0.5
    c = kref.make_inputs(spec(id="t/other"), torch.device("cpu"))
    assert not torch.equal(a.q, c.q)


def test_strided_qkv_inputs_are_views_of_one_fused_tensor(kref) -> None:
    s = spec(layout="strided-qkv", heads_q=16, heads_kv=1, dtype="fp16", head_dim_qk=64,
             head_dim_v=64)
    inp = kref.make_inputs(s, torch.device("cpu"))
    fused = inp.leaves["qkv"]
    for t in (inp.q, inp.k, inp.v):
        assert t.data_ptr() >= fused.data_ptr() and not t.is_contiguous()
        assert t.stride(-1) == 1
    assert inp.k.stride(1) == (16 + 2) * 64 * 2  # token stride spans the whole fused row
    out = kref.naive_attention(inp.q, inp.k, inp.v, kref.allowed(32, 32, "causal", None))
    out.backward(inp.dout)
    grads = inp.grads()
    assert grads["dq"].shape == inp.q.shape and grads["dk"].shape == inp.k.shape


def test_judge_catches_a_kernel_that_ignores_strides(kref) -> None:
    """Seed 004: reading strided k/v as if contiguous gives errors of order 1, far above
    the tolerance; the correct computation passes."""
    s = spec(layout="strided-qkv", heads_q=16, heads_kv=1, dtype="fp16", head_dim_qk=64,
             head_dim_v=64, seq_q=64, seq_kv=64, batch=1, direction="fwd")
    inp = kref.make_inputs(s, torch.device("cpu"))
    want = kref.reference(s, inp)["out"]
    base = kref.reference(s, inp, dtype=torch.float16)["out"]
    good = kref.naive_attention(inp.q, inp.k, inp.v, kref.allowed(64, 64, "causal", None))
    assert kref.check("out", good, want, base, "fp16").passed

    def as_contiguous(t):
        b, n, h, d = t.shape
        return torch.as_strided(t, (b, n, h, d), (n * h * d, h * d, d, 1), t.storage_offset())

    bad = kref.naive_attention(inp.q, as_contiguous(inp.k), as_contiguous(inp.v),
                               kref.allowed(64, 64, "causal", None))
    verdict = kref.check("out", bad, want, base, "fp16")
    assert not verdict.passed and verdict.rel_error > 0.1


def test_tolerance_is_k_times_baseline_plus_eps_floor(kref) -> None:
    ref = torch.ones(4, dtype=torch.float64)
    base = ref + 0.001
    c = kref.check("out", ref.clone().to(torch.bfloat16), ref, base, "bf16")
    assert c.tolerance == pytest.approx(kref.K_FWD * 0.001 + kref.F_FWD * kref.EPS["bf16"])
    g = kref.check("dq", ref.to(torch.bfloat16), ref, base, "bf16")
    assert g.tolerance == pytest.approx(kref.K_BWD * 0.001 + kref.F_BWD * kref.EPS["bf16"])
    far = kref.check("out", (ref * 1.5).to(torch.bfloat16), ref, base, "bf16")
    assert not far.passed and far.rel_error == pytest.approx(0.5)


def test_nan_and_poisoned_elements_fail_and_are_counted(kref) -> None:
    ref = torch.ones(8, dtype=torch.float64)
    got = torch.ones(8, dtype=torch.bfloat16)
    got.view(torch.int16)[:3] = -1  # 0xFFFF: the poison pattern, a NaN
    got[3] = float("inf")
    c = kref.check("out", got, ref, ref, "bf16")
    assert not c.passed and c.nonfinite == 4 and c.unwritten == 3


def test_dropout_mask_is_read_back_through_a_diagonal_v(kref) -> None:
    s = spec(dropout=0.25, mask="no_mask", seq_q=64, seq_kv=64, head_dim_v=64, batch=4)
    inp = kref.make_inputs(s, torch.device("cpu"))
    ok = kref.allowed(64, 64, "no_mask", None)
    keep = torch.rand(4, 4, 64, 64, generator=torch.Generator().manual_seed(1)) > 0.25
    out = kref.naive_attention(inp.q.double(), inp.k.double(), inp.v.double(), ok, keep=keep,
                               dropout=0.25)
    assert torch.equal(kref.dropout_keep(s, out), keep)
    good, note = kref.keep_fraction_ok(s, keep)
    assert good, note
    assert not kref.keep_fraction_ok(s, torch.ones_like(keep))[0]  # "dropout" that drops nothing


def test_flops_count_only_allowed_pairs(kref) -> None:
    full = kref.attention_flops(spec(mask="no_mask", direction="fwd"))
    causal = kref.attention_flops(spec(mask="causal", direction="fwd"))
    assert full == 2 * 2 * 32 * 32 * 4 * (32 + 32)
    assert causal / full == pytest.approx((32 * 33 / 2) / (32 * 32))
    assert kref.attention_flops(spec(mask="no_mask")) == pytest.approx(3.5 * full)
