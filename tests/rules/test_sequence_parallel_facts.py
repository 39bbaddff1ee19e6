"""The derived workload facts the sequence-parallel rules read: how heads, kv heads and the
sequence split over the context/sequence-parallel ranks."""

from __future__ import annotations

from dataclasses import replace

from doctor.model import WORKLOAD_DERIVED, ContextParallel, Workload


def _wl(heads: int, kv: int, size: int, seq: int = 4096) -> Workload:
    return Workload(num_heads=heads, num_kv_heads=kv, seq_len_q=seq, seq_len_kv=seq,
                    context_parallel=ContextParallel(size=size, impl="ulysses"))


def test_qwen25_7b_over_8_ranks_cannot_split_its_28_heads() -> None:
    w = _wl(28, 4, 8)
    assert not w.cp_heads_divisible
    assert not w.cp_kv_heads_divisible
    assert w.cp_kv_heads_repeatable  # 8 ranks, 4 kv heads: each kv head is repeated on two ranks


def test_qwen25_14b_over_40_ranks_repeats_kv_heads() -> None:
    w = _wl(40, 8, 40)
    assert w.cp_heads_divisible and not w.cp_kv_heads_divisible and w.cp_kv_heads_repeatable
    assert not _wl(40, 8, 16).cp_heads_divisible
    assert not _wl(40, 8, 5).cp_kv_heads_repeatable


def test_per_rank_heads_and_sequence_split() -> None:
    assert not _wl(32, 32, 8).cp_local_heads_divisible  # 4 heads per rank, not divisible by 8
    assert _wl(32, 32, 4).cp_local_heads_divisible  # 8 heads per rank
    assert not _wl(32, 8, 4, seq=8191).cp_seq_divisible
    assert _wl(32, 8, 4, seq=8192).cp_seq_divisible
    # torch's context-parallel load balancer cuts the sequence into 2 x cp_size chunks
    assert not _wl(32, 8, 4, seq=8196).cp_seq_divisible_2x  # divisible by 4, not by 8
    assert _wl(32, 8, 4, seq=8192).cp_seq_divisible_2x
    # TE 1.9 views one rank's bias keys (seq / cp) as 2 x cp chunks: 6000 / 4 = 1500, not by 8
    assert not _wl(32, 8, 4, seq=6000).cp_kv_local_divisible_2x
    assert _wl(32, 8, 4, seq=8192).cp_kv_local_divisible_2x  # 2048 per rank, by 8
    # torchtitan 0.2's check: a multiple of tensor_parallel x 2 x cp_size
    assert _wl(32, 8, 2, seq=4100).cp_seq_divisible_2x
    assert not replace(_wl(32, 8, 2, seq=4100), tensor_parallel=2).tp_cp_seq_divisible  # not by 8
    assert replace(_wl(32, 8, 2, seq=4096), tensor_parallel=2).tp_cp_seq_divisible
    assert _wl(8, 8, 8).cp_one_head_per_rank  # one head per rank after the all-to-all
    assert not _wl(16, 8, 8).cp_one_head_per_rank


def test_per_rank_heads_under_tensor_parallelism() -> None:
    # 64 heads, TP 2, 8 ranks: 32 heads per TP rank split evenly, 4 per rank after that do not
    w = _wl(64, 64, 8)
    assert w.cp_tp_local_heads_divisible and w.cp_tp_local_heads_per_rank_divisible  # TP 1: 8 per rank
    w = replace(w, tensor_parallel=2)
    assert w.cp_tp_local_heads_divisible and not w.cp_tp_local_heads_per_rank_divisible
    # 40 heads, TP 4, 4 ranks: 10 heads per TP rank do not split over 4
    w = _wl(40, 40, 4)
    assert w.cp_tp_local_heads_divisible and not w.cp_tp_local_heads_per_rank_divisible
    w = replace(w, tensor_parallel=4)
    assert not w.cp_tp_local_heads_divisible


def test_key_value_heads_megatron_deepspeed_hands_distributed_attention() -> None:
    # without tensor parallelism the caller's grouped key/value heads reach DistributedAttention
    w = _wl(48, 12, 8)
    assert w.ulysses_gqa and w.ulysses_kv_heads == 12 and not w.cp_tp_local_kv_heads_divisible
    # with it the caller is Megatron-DeepSpeed, which repeats them to one rank's query heads (24)
    w = replace(w, tensor_parallel=2)
    assert not w.ulysses_gqa and w.ulysses_kv_heads == 24 and w.cp_tp_local_kv_heads_divisible
    # 8 heads, TP 2, 8 ranks: 4 heads per TP rank are fewer than the ranks (8 alone are not)
    w = _wl(8, 8, 8)
    assert not w.cp_tp_local_heads_below_size and w.cp_tp_local_one_head_per_rank
    w = replace(w, tensor_parallel=2)
    assert w.cp_tp_local_heads_below_size and w.cp_tp_local_kv_heads_below_size
    assert not w.cp_tp_local_one_head_per_rank
    assert replace(_wl(16, 16, 8), tensor_parallel=2).cp_tp_local_one_head_per_rank


def test_the_facts_are_readable_by_rules() -> None:
    for name in ("cp_heads_divisible", "cp_kv_heads_divisible", "cp_kv_heads_repeatable",
                 "cp_local_heads_divisible", "cp_seq_divisible", "cp_seq_divisible_2x", "cp_kv_local_divisible_2x", "tp_cp_seq_divisible", "cp_one_head_per_rank",
                 "cp_tp_local_heads_divisible", "cp_tp_local_heads_per_rank_divisible",
                 "ulysses_kv_heads", "ulysses_gqa", "cp_tp_local_kv_heads_divisible",
                 "cp_tp_local_heads_below_size", "cp_tp_local_kv_heads_below_size",
                 "cp_tp_local_one_head_per_rank"):
        assert name in WORKLOAD_DERIVED


def test_te_load_balanced_chunk_lengths() -> None:
    # TE splits the sequence into 2 x cp_size chunks; its all_gather steps run one query chunk
    # against a whole number of key/value chunks (cuDNN 9.3-9.6 want them multiples of 64)
    assert _wl(32, 8, 2, seq=4096).cp_chunk_len_q == 1024
    assert _wl(32, 8, 2, seq=4000).cp_chunk_len_kv == 1000
    assert _wl(32, 8, 8, seq=4096).cp_chunk_len_q == 256
    assert "cp_chunk_len_q" in WORKLOAD_DERIVED and "cp_chunk_len_kv" in WORKLOAD_DERIVED


def test_padded_sequence_lengths_divide_by_any_cp_size() -> None:
    w = _wl(32, 8, 6, seq=8191)
    assert not w.cp_seq_divisible
    assert w.cp_seq_len_q_padded == 8196 and w.cp_seq_len_kv_padded == 8196
    assert _wl(32, 8, 4, seq=8192).cp_seq_len_q_padded == 8192
    assert "cp_seq_len_q_padded" in WORKLOAD_DERIVED


def test_ds_ulysses_pad_fix_clears_the_finding_on_six_ranks() -> None:
    # the fix once set seq_len to a fixed 8192, which 6 ranks do not divide either
    from doctor.fix.recheck import recheck
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    cat = load_catalogue(use_cache=False)
    rid = "DS-ULYSSES-SEQ-NOT-DIVISIBLE"
    facts, wl = case_inputs({"packages": {"deepspeed": "0.16.0"},
                             "workload": {"framework": "deepspeed", "seq_len": 8191,
                                          "context_parallel": {"size": 6, "impl": "ulysses"}}})
    before = diagnose(cat, facts, wl)
    assert before.result(rid).status == "fired"
    rule = next(r for r in cat.rules if r.id == rid)
    assert all(recheck(cat, facts, wl, fix, (rid,), before).cleared == (rid,) for fix in rule.fixes)
