"""workload.window_shorter_than_seq: a left window that leaves keys out of the sequence (the
sliding-window regressions only change results when the keys outnumber the window)."""

from __future__ import annotations

from doctor.model import WORKLOAD_DERIVED, Workload


def _wl(window, seq_kv: int) -> Workload:
    return Workload(window_size=window, seq_len_q=seq_kv, seq_len_kv=seq_kv)


def test_a_window_shorter_than_the_keys() -> None:
    # HF sliding_window=4096 becomes window_size (4095, 0): 4096 keys per query
    assert not _wl((4095, 0), 4096).window_shorter_than_seq
    assert _wl((4095, 0), 4097).window_shorter_than_seq
    assert _wl((4096, 0), 8192).window_shorter_than_seq


def test_no_window_or_an_unbounded_left_side() -> None:
    assert not _wl(None, 8192).window_shorter_than_seq
    assert not _wl((-1, -1), 8192).window_shorter_than_seq
    assert not _wl((-1, 0), 8192).window_shorter_than_seq


def test_the_fact_is_readable_by_rules() -> None:
    assert "window_shorter_than_seq" in WORKLOAD_DERIVED


def test_a_switched_off_window_is_kept_apart(tmp_path) -> None:
    """Qwen2 configs keep sliding_window with use_sliding_window false: no window_size (the model
    has none), but unused_sliding_window, which some transformers releases apply anyway."""
    import json

    from doctor.workload import build, workload_from_model

    cfg = {"model_type": "qwen2", "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584,
           "sliding_window": 4096, "use_sliding_window": False}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    out = workload_from_model(p)
    assert "window_size" not in out and out["unused_sliding_window"] == 4096
    w = build({"unused_sliding_window": 4096, "seq_len": 4097})
    assert w.unused_window_shorter_than_seq and not w.sliding_window
    assert not build({"unused_sliding_window": 4096, "seq_len": 4096}).unused_window_shorter_than_seq
    assert not build({"seq_len": 8192}).unused_window_shorter_than_seq
    assert "unused_window_shorter_than_seq" in WORKLOAD_DERIVED
    # 4.39-4.41's mask keeps window + 1 keys: only a longer sequence loses one
    assert not build({"unused_sliding_window": 4096, "seq_len": 4097}).unused_window_plus_one_shorter_than_seq
    assert build({"unused_sliding_window": 4096, "seq_len": 4098}).unused_window_plus_one_shorter_than_seq
    assert not build({"seq_len": 8192}).unused_window_plus_one_shorter_than_seq
    assert "unused_window_plus_one_shorter_than_seq" in WORKLOAD_DERIVED


def test_a_window_longer_than_the_keys() -> None:
    # transformers skips the SDPA mask only for kv_length < sliding_window: sliding_window=4096
    # (window_size (4095, 0)) with 4096 keys still gets a mask tensor, 4095 keys do not
    assert _wl((4095, 0), 4095).window_longer_than_seq
    assert not _wl((4095, 0), 4096).window_longer_than_seq
    assert not _wl((4095, 0), 4097).window_longer_than_seq
    assert not _wl(None, 2048).window_longer_than_seq
    assert _wl((-1, 0), 8192).window_longer_than_seq
    assert "window_longer_than_seq" in WORKLOAD_DERIVED


def _cp(window, seq_kv: int, size: int, impl: str = "torch_ring") -> Workload:
    from doctor.model import ContextParallel

    return Workload(window_size=window, seq_len_q=seq_kv, seq_len_kv=seq_kv,
                    context_parallel=ContextParallel(size=size, impl=impl))


def test_a_window_longer_than_one_ranks_shard() -> None:
    # torch context parallelism shards input_ids before the forward: transformers' kv_length is
    # seq_len / cp_size, so a 4096-key window over 4096 tokens on 2 ranks builds no mask
    w = _cp((4095, 0), 4096, 2)
    assert w.seq_len_kv_rank == 2048
    assert w.window_longer_than_rank_seq and not w.window_longer_than_seq
    # a window between the shard and the sequence: no mask either (the window is dropped)
    w = _cp((3071, 0), 4096, 2)
    assert w.window_longer_than_rank_seq and w.window_shorter_than_seq
    # a shard as long as the window still gets a mask (kv_length == sliding_window)
    assert not _cp((4095, 0), 8192, 2).window_longer_than_rank_seq
    # an uneven split: the longest shard (ceil) decides
    assert _cp((4095, 0), 8190, 2).seq_len_kv_rank == 4095
    assert _cp((4095, 0), 8191, 2).seq_len_kv_rank == 4096
    # other CP implementations and no CP: the whole sequence
    assert _cp((4095, 0), 4096, 2, "te").seq_len_kv_rank == 4096
    assert not _cp((4095, 0), 4096, 2, "te").window_longer_than_rank_seq
    assert _wl((4095, 0), 4095).window_longer_than_rank_seq
    assert not _wl((4095, 0), 4096).window_longer_than_rank_seq
    assert not _wl(None, 2048).window_longer_than_rank_seq
    assert "window_longer_than_rank_seq" in WORKLOAD_DERIVED
    assert "seq_len_kv_rank" in WORKLOAD_DERIVED


def test_minus_one_zero_is_causal_not_a_sliding_window() -> None:
    # TransformerEngine sets window_size (-1, 0) for every causal mask and writes it to its debug
    # log; it is plain causal attention, not a window that needs flash-attn 2.3+ (TE 1.11's filter
    # counts only window_size[0] != -1 or window_size[1] not in (-1, 0))
    assert not _wl((-1, 0), 4096).sliding_window
    assert not _wl((-1, -1), 4096).sliding_window
    assert _wl((-1, 5), 4096).sliding_window and _wl((127, 0), 4096).sliding_window
