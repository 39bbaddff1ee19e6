"""CP attention pieces in one process: sharding, online-softmax merging, and the check itself
(world size 1 here; 3 ranks run in test_distributed.py), including that it catches a wrong mask."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from doctor.cluster import cp_attention as cp  # noqa: E402


def test_load_balanced_sharding_round_trips() -> None:
    x = torch.arange(24).reshape(1, 1, 24, 1)
    parts = [cp._shard(x, r, 3) for r in range(3)]
    assert parts[0].flatten().tolist() == [0, 1, 2, 3, 20, 21, 22, 23]  # chunks 0 and 5
    assert torch.equal(cp._unshard(parts, 3), x)


def test_partial_results_merge_to_full_softmax() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    full = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1) @ v
    mask_a = torch.ones(6, 3, dtype=torch.bool)
    mask_a[0] = False  # row 0 sees nothing in the first block: lse -inf, out 0
    out_a, lse_a = cp._partial(q, k[:, :, :3], v[:, :, :3], mask_a)
    assert torch.isinf(lse_a[..., 0]).all() and (out_a[..., 0, :] == 0).all()
    out_b, lse_b = cp._partial(q, k[:, :, 3:], v[:, :, 3:], None)
    merged, _ = cp._merge(out_a, lse_a, out_b, lse_b)
    expected_row0 = torch.softmax(q[..., :1, :] @ k[:, :, 3:].transpose(-1, -2) / 2.0, dim=-1) @ v[:, :, 3:]
    assert torch.allclose(merged[..., 1:, :].double(), full[..., 1:, :], atol=1e-6)
    assert torch.allclose(merged[..., :1, :].double(), expected_row0, atol=1e-6)


def test_bottom_right_mask() -> None:
    m = cp._bottom_right_mask(2, 4, "cpu")
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_check_passes_on_one_rank(one_rank: None) -> None:
    cfg = cp.CpConfig.for_device(False, 1)
    results, errors = cp.check(0, 1, torch.device("cpu"), cfg)
    assert errors == ()
    assert [r.scheme for r in results] == ["all_gather", "p2p"]
    for r in results:
        assert r.ok is True and r.max_rel_error is not None and r.max_rel_error < r.tolerance
        assert r.kernel and r.ms is not None


def test_check_catches_a_top_left_mask(one_rank: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.nn.functional as F

    def top_left(q: Any, k: Any, v: Any, rank: int, world: int, causal: bool, group: Any = None) -> Any:
        full_k, full_v = cp._unshard([k], 1), cp._unshard([v], 1)
        chunk = q.shape[2] // 2
        outs = []
        for i, cid in enumerate(cp.chunk_ids(rank, world)):
            end = (cid + 1) * chunk
            outs.append(F.scaled_dot_product_attention(
                q[:, :, i * chunk:(i + 1) * chunk], full_k[:, :, :end], full_v[:, :, :end], is_causal=True))
        return torch.cat(outs, dim=2), "top-left (wrong)"

    monkeypatch.setitem(cp.SCHEME_FN, "all_gather", top_left)
    results, _ = cp.check(0, 1, torch.device("cpu"), cp.CpConfig.for_device(False, 1))
    wrong = results[0]
    assert wrong.ok is False and wrong.max_rel_error > wrong.tolerance
    assert "exceeds" in wrong.detail
    assert results[1].ok is True


def test_a_raising_scheme_is_reported_not_raised(one_rank: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("kernel not supported")

    monkeypatch.setitem(cp.SCHEME_FN, "p2p", boom)
    results, errors = cp.check(0, 1, torch.device("cpu"), cp.CpConfig.for_device(False, 1))
    assert results[1].ok is False and "non-finite output from rank(s) [0]" in results[1].detail
    assert errors == ("CP p2p: RuntimeError: kernel not supported",)


def test_sequence_is_rounded_to_the_world() -> None:
    assert cp.CpConfig.for_device(True, 3).seq_len % 6 == 0
    assert cp.CpConfig.for_device(False, 4).seq_len == 64
