"""Workloads from files, flags and Hugging Face configs, and the errors a user sees."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from doctor.commands.options import parse_workload_flags
from doctor.errors import InputError
from doctor.model import WORKLOAD_UNKNOWN_WHEN_NONE
from doctor.workload import BOOL_KEYS, resolve_workload, workload_from_model


def test_no_workload_is_the_default_profile_and_says_so() -> None:
    w = resolve_workload()
    assert (w.dtype, w.head_dim_qk, w.num_heads, w.num_kv_heads, w.mask, w.training, w.seq_len_q) == ("bf16", 128, 32, 8, "causal", True, 4096)
    assert w.source == "default profile" and "head_dim_qk" in w.defaulted


def test_flags_override_file_and_mark_fields_as_given(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("dtype: float16\nhead_dim: 64\ncontext_parallel: {size: 2, comm_type: all_gather}\n")
    w = resolve_workload(workload_file=f, flags=parse_workload_flags(["--head-dim-qk", "192", "--inference"]))
    assert (w.dtype, w.head_dim_qk, w.head_dim_v, w.training) == ("fp16", 192, 64, False)
    assert w.cp_size == 2 and w.cp_comm_type == "all_gather"
    assert "dtype" not in w.defaulted and "mask" in w.defaulted
    assert w.source == f"{f} + flags"


def test_unknown_key_in_file_names_key_and_line(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("dtype: bf16\nhead_dims: 128\n")
    with pytest.raises(InputError) as exc:
        resolve_workload(workload_file=f)
    assert exc.value.one_line().startswith(f"{f}:2: workload: unknown key 'head_dims'")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("mask: diagonal\n", "expected one of no_mask, causal"),
        ("head_dim: -3\n", "must be >= 1"),
        ("num_heads: 32\nnum_kv_heads: 5\n", "must divide num_heads"),
        ("dropout: 1.5\n", "must be in [0, 1)"),
        ("window_size: 128\n", "expected [left, right]"),
        ("dtype: [bf16\n", "invalid YAML"),
        ("- 1\n- 2\n", "must be a mapping"),
    ],
)
def test_bad_workload_values(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        resolve_workload(workload_file=f)
    assert needle in exc.value.one_line()


def test_unknown_flag_is_a_usage_error_listing_flags() -> None:
    with pytest.raises(InputError) as exc:
        parse_workload_flags(["--head-dimm", "128"])
    line = exc.value.one_line()
    assert "no such option: --head-dimm" in line and "did you mean --head-dim?" in line
    assert "attn-doctor check --help" in line and len(line) < 160  # a hint, not the whole flag list


def test_deepseek_mla_config(tmp_path: Path) -> None:
    cfg = {"num_attention_heads": 128, "num_key_value_heads": 128, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "hidden_size": 7168, "torch_dtype": "bfloat16", "max_position_embeddings": 163840}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    w = resolve_workload(model=tmp_path)
    assert (w.head_dim_qk, w.head_dim_v, w.mla, w.dtype, w.seq_len_q) == (192, 128, True, "bf16", 4096)


def test_gemma2_softcap_window_and_gqa(tmp_path: Path) -> None:
    cfg = {"num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "hidden_size": 3584, "sliding_window": 4096, "attn_logit_softcapping": 50.0, "torch_dtype": "bfloat16"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    out = workload_from_model(p)
    assert out["head_dim"] == 256 and out["softcap"] == 50.0 and out["window_size"] == [4095, 0] and out["num_kv_heads"] == 8


@pytest.mark.parametrize(
    "cfg,window",
    [
        # Qwen2's config class defaults use_sliding_window to False and save_pretrained drops defaults
        ({"model_type": "qwen2", "sliding_window": 4096}, None),
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": True}, [4095, 0]),
        # a LLaVA whose text model is Qwen2: the text config's switch decides
        ({"model_type": "llava", "text_config": {"model_type": "qwen2", "sliding_window": 4096}}, None),
        # Mistral has no switch: its window always applies
        ({"model_type": "mistral", "sliding_window": 4096}, [4095, 0]),
    ],
)
def test_a_missing_use_sliding_window_reads_as_the_config_class_default(tmp_path: Path, cfg: dict, window: object) -> None:
    full = {"num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, **cfg}
    if "text_config" in cfg:
        full["text_config"] = {"num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, **cfg["text_config"]}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(full))
    out = workload_from_model(p)
    assert out.get("window_size") == window
    assert out.get("unused_sliding_window") == (4096 if window is None else None)


def test_model_config_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="model config not found"):
        resolve_workload(model=tmp_path / "nope")
    bad = tmp_path / "config.json"
    bad.write_text('{"num_attention_heads": 8,,}')
    with pytest.raises(InputError) as exc:
        resolve_workload(model=bad)
    assert exc.value.line == 1 and "invalid JSON" in exc.value.message


@pytest.mark.parametrize(
    "cfg,alibi",
    [
        ({"model_type": "bloom", "n_head": 32, "hidden_size": 4096}, True),
        ({"model_type": "mpt", "n_heads": 32, "d_model": 4096, "attn_config": {"alibi": True}}, True),
        ({"model_type": "falcon", "num_attention_heads": 71, "hidden_size": 4544, "alibi": False}, False),
    ],
)
def test_alibi_models(tmp_path: Path, cfg: dict, alibi: bool) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert workload_from_model(p).get("alibi", False) is alibi


@pytest.mark.parametrize("text", ["softcap: .nan\n", "softcap: -1\n", "head_dim: 100000\n"])
def test_out_of_range_values_are_refused(tmp_path: Path, text: str) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(text)
    with pytest.raises(InputError):
        resolve_workload(workload_file=f)


def test_bad_head_count_in_model_config_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"num_attention_heads": 8.5, "hidden_size": 4096}))
    with pytest.raises(InputError, match="positive integer"):
        resolve_workload(model=p)


def test_a_comm_type_flag_keeps_the_cp_size_of_the_workload_file(tmp_path: Path) -> None:
    """`--cp-comm-type a2a` over a workload file with context_parallel.size 2 changes only the
    comm type (what a fix's re-check command passes); with no size anywhere it is an error."""
    from doctor.errors import InputError
    from doctor.workload import resolve_workload

    wl = tmp_path / "w.yaml"
    wl.write_text("context_parallel: {size: 2, comm_type: p2p}\n", encoding="utf-8")
    w = resolve_workload(workload_file=wl, flags={"context_parallel": {"comm_type": "a2a"}})
    assert (w.cp_size, w.cp_comm_type) == (2, "a2a")
    import pytest

    with pytest.raises(InputError, match="needs a context-parallel size"):
        resolve_workload(flags={"context_parallel": {"comm_type": "a2a"}})


@pytest.mark.parametrize("key", BOOL_KEYS)
def test_every_boolean_key_is_a_workload_key_and_a_flag(tmp_path: Path, key: str) -> None:
    # e.g. kv_cache: TE's KV-cache filter reads inference_params, which a prefill passes too, so
    # the workload has to say "a KV cache is in use" independently of seq_len_q; sdpa_fa3: the
    # program activated torch's FlashAttention-3 implementation.
    default = getattr(resolve_workload(), key)
    f = tmp_path / "w.yaml"
    f.write_text(f"{key}: {'false' if default else 'true'}\nseq_len: 2048\n")
    w = resolve_workload(workload_file=f)
    assert getattr(w, key) is (not default) and w.seq_len_q == 2048 and key not in w.defaulted
    flag = key.replace("_", "-")
    assert parse_workload_flags([f"--{flag}"]) == {key: True}
    assert parse_workload_flags([f"--no-{flag}"]) == {key: False}
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"{key}: maybe\n")
    with pytest.raises(InputError) as exc:
        resolve_workload(workload_file=bad)
    assert key in str(exc.value)


def test_te_fp8_recipe_follows_the_gpu_the_release_and_the_switch() -> None:
    """The recipe TE's attention runs with: stated, else TE's default for the GPU and release,
    then NVTE_DPA_FP8_RECIPE (read from TE 2.8; MXFP8 is switched from 2.15)."""
    from doctor.rules.conditions import te_dpa_fp8_recipe as recipe

    assert recipe("2.20.2", 100, None, None, None) == "mxfp8"  # B200: MXFP8 by default
    assert recipe("2.20.2", 90, None, None, None) == "delayed"
    assert recipe("2.20.2", 120, None, None, None) == "current"  # sm120 from 2.7
    assert recipe("2.6.0.post1", 120, None, None, None) == "delayed"  # 2.6: MXFP8 only sm100-119
    assert recipe("2.3.0", 120, None, None, None) == "mxfp8"  # 2.0-2.5: every sm100+
    assert recipe("1.13.0", None, None, None, None) == "delayed"  # no GPU needed before 2.0
    assert recipe("2.0.0", 100, None, None, None) == "mxfp8"  # 2.0 (tag only) already defaults to MXFP8 on sm100+
    assert recipe("2.20.2", None, None, None, None) is None  # the default needs the GPU
    assert recipe("2.20.2", 100, None, "megatron", None) == "delayed"
    assert recipe("2.20.2", 100, "block", None, None) == "block"
    assert recipe("2.14.1", 100, "mxfp8", None, "DelayedScaling") == "mxfp8"
    assert recipe("2.15.0", 100, "mxfp8", None, "DelayedScaling") == "delayed"
    assert recipe("2.10.0", 90, "delayed", None, "Float8CurrentScaling") == "current"
    assert recipe("2.7.0", 90, "delayed", None, "Float8CurrentScaling") == "delayed"  # not read before 2.8
    assert recipe("2.20.2", 90, "block", None, "F16") == "f16"


@pytest.mark.parametrize(
    "extra, tower",
    [
        # Qwen-VL(-Chat): model_type qwen with a `visual` section; its modeling_qwen.py never calls flash-attn
        ({"visual": {"heads": 16, "layers": 48, "width": 1664}}, True),
        ({"vision_config": {"hidden_size": 1024}}, True),
        # Qwen-1 text (Qwen-7B-Chat) and Qwen-Audio (an `audio` section): no vision tower
        ({}, False),
        ({"audio": {"n_head": 20}}, False),
    ],
)
def test_vision_tower_from_model_config(tmp_path: Path, extra: dict, tower: bool) -> None:
    cfg = {"model_type": "qwen", "hidden_size": 4096, "num_attention_heads": 32, **extra}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert workload_from_model(tmp_path)["vision_tower"] is tower
    assert resolve_workload(model=tmp_path).vision_tower is tower
    assert resolve_workload().vision_tower is None  # not read, not stated: unknown


@pytest.mark.parametrize(
    "extra, remote",
    [
        # microsoft/Phi-3-mini-4k-instruct's config.json maps AutoModelForCausalLM to its own modeling_phi3.py
        ({"auto_map": {"AutoConfig": "configuration_phi3.Phi3Config", "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"}}, True),
        ({"auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"}}, False),
        ({}, False),
    ],
)
def test_remote_code_from_model_config(tmp_path: Path, extra: dict, remote: bool) -> None:
    cfg = {"model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, **extra}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert workload_from_model(tmp_path)["remote_code"] is remote
    assert resolve_workload(model=tmp_path).remote_code is remote
    assert resolve_workload().remote_code is None  # not read, not stated: unknown


def test_text_model_type_from_a_wrapper_config(tmp_path: Path) -> None:
    """A LLaVA config with a Qwen2 text_config: the outer family stays llava, the language model's
    family (whose attention and mask code runs) is read as text_model_type and can be stated."""
    cfg = {"model_type": "llava", "text_config": {"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2}, "vision_config": {"hidden_size": 1152}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    wl = resolve_workload(model=tmp_path)
    assert (wl.model_type, wl.text_model_type, wl.num_heads, wl.num_kv_heads) == ("llava", "qwen2", 14, 2)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14}))
    assert resolve_workload(model=tmp_path).text_model_type is None
    wf = tmp_path / "w.yaml"
    wf.write_text("model_type: llava\ntext_model_type: Qwen2\n")
    assert resolve_workload(workload_file=wf).text_model_type == "qwen2"
    wf.write_text("text_model_type: 'qwen 2'\n")
    with pytest.raises(InputError, match="text_model_type"):
        resolve_workload(workload_file=wf)


def test_distributed_megatron_is_a_workload_value(tmp_path: Path) -> None:
    # verl's Megatron workers do not load verl's Qwen-VL patch modules (VERL-QWEN-VL-GLM4V-TRANSFORMERS-5-4)
    path = tmp_path / "w.yaml"
    path.write_text("framework: verl\ndistributed: megatron\n")
    wl = resolve_workload(workload_file=path, flags=parse_workload_flags([]))
    assert wl.distributed == "megatron"


def test_tensor_parallel_gives_the_heads_of_one_rank() -> None:
    # TE's a2a-CP filter counts one tensor-parallel rank's heads (TE-FUSED-CP-A2A-ODD-HEADS)
    from doctor.model import Workload

    w = Workload(num_heads=64, num_kv_heads=8, tensor_parallel=8)
    assert (w.tp_local_heads, w.tp_local_kv_heads) == (8, 1)
    assert Workload(num_heads=32, num_kv_heads=4, tensor_parallel=8).tp_local_kv_heads == 1  # replicated
    assert Workload().tp_local_heads == Workload().num_heads


def test_batch_heads_is_batch_times_the_heads_of_one_rank() -> None:
    # torch 2.0's SDPA priority_order compares batch x heads with 60 (SDPA-FLASH-TORCH-2-0-0-SM86-BACKWARD)
    from doctor.model import WORKLOAD_DERIVED, Workload

    assert "batch_heads" in WORKLOAD_DERIVED
    assert Workload(batch_size=2, num_heads=32, num_kv_heads=8).batch_heads == 64
    assert Workload(batch_size=4, num_heads=64, num_kv_heads=8, tensor_parallel=8).batch_heads == 32


def test_queries_per_batch_head_is_below_6_exactly_when_6_batch_heads_exceed_the_queries() -> None:
    # torch 2.1's training order: memory-efficient first when 6 x batch x heads > seq_len_q
    from doctor.model import WORKLOAD_DERIVED, Workload

    assert "queries_per_batch_head" in WORKLOAD_DERIVED
    for seq in range(1, 400, 7):
        w = Workload(batch_size=2, num_heads=16, num_kv_heads=16, seq_len_q=seq, seq_len_kv=seq)
        assert (w.queries_per_batch_head < 6) is (6 * w.batch_heads > seq)


def test_flex_decode_rows_counts_a_one_token_query_once_per_query_head_of_a_group() -> None:
    # torch's flex_decoding tiles seq_len_q x (query heads per kv head) rows with enable_gqa
    from doctor.model import WORKLOAD_DERIVED, Workload

    assert "flex_decode_rows" in WORKLOAD_DERIVED
    assert Workload(num_heads=32, num_kv_heads=32, seq_len_q=1, seq_len_kv=1024).flex_decode_rows == 1
    assert Workload(num_heads=32, num_kv_heads=8, seq_len_q=4, seq_len_kv=1024).flex_decode_rows == 16
    assert Workload(num_heads=32, num_kv_heads=8, seq_len_q=5, seq_len_kv=1024).flex_decode_rows == 20


def test_flex_gqa_group_is_a_power_of_two_only_for_whole_power_of_two_groups() -> None:
    # torch 2.9+'s flex_decoding takes a grouped short query only for a power-of-two group
    from doctor.model import WORKLOAD_DERIVED, Workload

    assert {"gqa_group_pow2", "heads_pow2"} <= set(WORKLOAD_DERIVED)
    assert Workload(num_heads=32, num_kv_heads=8).gqa_group_pow2
    assert Workload(num_heads=12, num_kv_heads=3).gqa_group_pow2  # group 4
    assert Workload(num_heads=40, num_kv_heads=40).gqa_group_pow2  # group 1
    assert not Workload(num_heads=12, num_kv_heads=4).gqa_group_pow2  # group 3
    assert not Workload(num_heads=28, num_kv_heads=4).gqa_group_pow2  # group 7
    assert not Workload(num_heads=6, num_kv_heads=4).gqa_group_pow2  # not a whole group
    # transformers 4.51+ repeats the kv heads itself when the query heads are not a power of two
    assert Workload(num_heads=64, num_kv_heads=8).heads_pow2
    assert not Workload(num_heads=40, num_kv_heads=8).heads_pow2


def test_fa4_sm12x_forward_tile_fits_equal_head_dims_up_to_192() -> None:
    # flash-attn-4's 12.x forward: 128x64 tile above head_dim 64 (Q 256*d, K 128*d, V 128*dv bytes)
    from doctor.model import WORKLOAD_DERIVED, Workload

    assert "fa4_sm12x_fwd_smem" in WORKLOAD_DERIVED
    assert Workload(head_dim_qk=192, head_dim_v=192).fa4_sm12x_fwd_smem == 98304
    assert Workload(head_dim_qk=200, head_dim_v=200).fa4_sm12x_fwd_smem == 106496  # padded to 208
    assert Workload(head_dim_qk=256, head_dim_v=256).fa4_sm12x_fwd_smem == 131072
    assert Workload(head_dim_qk=64, head_dim_v=64).fa4_sm12x_fwd_smem == 49152  # 128x128 tile


def test_fa4_sm12x_backward_tiles_fit_160_but_not_168_or_128_by_256() -> None:
    # flash-attn-4's 12.x backward: 64x64 tiles, head dims padded to 32, one Q/dO stage above 64
    from doctor.model import WORKLOAD_DERIVED, Workload

    assert "fa4_sm12x_bwd_smem" in WORKLOAD_DERIVED
    assert Workload(head_dim_qk=160, head_dim_v=160).fa4_sm12x_bwd_smem == 98816  # fits 101376
    assert Workload(head_dim_qk=168, head_dim_v=168).fa4_sm12x_bwd_smem == 115200  # padded to 192
    assert Workload(head_dim_qk=128, head_dim_v=256).fa4_sm12x_bwd_smem == 115200
    assert Workload(head_dim_qk=192, head_dim_v=128).fa4_sm12x_bwd_smem == 98816  # DeepSeek MLA
    assert Workload(head_dim_qk=64, head_dim_v=64).fa4_sm12x_bwd_smem == 66560  # two stages
    assert Workload(head_dim_qk=64, head_dim_v=160).fa4_sm12x_bwd_smem == 103424


def test_a_plans_context_parallel_change_round_trips_through_the_check_flags() -> None:
    # the fix plan's re-check command carries every context_parallel key a fix may change
    # (a Ulysses wrapper's attention included), so the re-check sees the fixed workload
    import shlex

    from doctor.fix.plan import check_args

    change = {"attn_implementation": "sdpa", "context_parallel": {"size": 2, "impl": "ulysses", "comm_type": "a2a", "attn_implementation": "sdpa"}}
    argv = shlex.split(" ".join(check_args({}, {}, change)))
    assert parse_workload_flags(argv) == {
        "attn_implementation": "sdpa",
        "context_parallel": {"size": "2", "impl": "ulysses", "comm_type": "a2a", "attn_implementation": "sdpa"},
    }
    w = resolve_workload(flags=parse_workload_flags(argv))
    assert (w.cp_size, w.cp_impl, w.cp_attn_implementation) == (2, "ulysses", "sdpa")


def test_the_strategy_flag_states_the_distributed_key_and_a_plan_re_checks_through_it() -> None:
    # `--distributed` is check's own option (every rank), so a fix that moves the workload to
    # another strategy (e.g. verl's FSDP workers) must re-check through --strategy, not collide
    from doctor.fix.plan import check_args

    argv = shlex.split(" ".join(check_args({}, {}, {"distributed": "fsdp"})))
    assert argv == ["--strategy", "fsdp"]
    assert resolve_workload(flags=parse_workload_flags(argv)).distributed == "fsdp"
    with pytest.raises(InputError) as exc:
        resolve_workload(flags=parse_workload_flags(["--strategy", "hsdp2"]))
    assert "hsdp2" in exc.value.one_line()
    # what typer leaves of `check --distributed fsdp`: the hint names the flag that was meant
    with pytest.raises(InputError) as exc:
        parse_workload_flags(["fsdp"])
    assert "--strategy fsdp" in exc.value.one_line()
    # `fix` has no --distributed option of its own: there the workload key's own name still works
    assert parse_workload_flags(["--distributed", "fsdp"], "fix") == {"distributed": "fsdp"}


@pytest.mark.parametrize("key, written, want, flag", [
    # sample-25 row 29: under ms-swift an adapter hands XTuner's dispatch a PEFT/Swift wrapper
    # (XTUNER-02, XTUNER-09 read workload.finetune); not stated it is unknown, not "full"
    ("finetune", "LoRA", "lora", "full"),
    # ms-swift refuses sequence parallelism for rlhf types other than grpo/dpo (SWIFT-RLHF-SP-TYPE-REFUSED)
    ("method", "GRPO", "grpo", "kto"),
])
def test_choice_keys_unknown_when_not_stated(tmp_path: Path, key: str, written: str, want: str, flag: str) -> None:
    assert getattr(resolve_workload(), key) is None
    f = tmp_path / "w.yaml"
    f.write_text(f"framework: ms-swift\n{key}: {written}\n")
    assert getattr(resolve_workload(workload_file=f), key) == want
    assert getattr(resolve_workload(workload_file=f, flags=parse_workload_flags([f"--{key}", flag])), key) == flag


@pytest.mark.parametrize("key", [k for k in BOOL_KEYS if k in WORKLOAD_UNKNOWN_WHEN_NONE])
def test_a_boolean_key_unknown_when_not_stated(tmp_path: Path, key: str) -> None:
    # e.g. static_cache (sample-34 row 17: a compilable KV cache makes transformers hand SDPA a
    # mask, SDPA-FLASH-ATTN-MASK), alibi_custom_slopes (sample-36 row 6: the caller's own ALiBi
    # slopes reach TE 1.9's FusedAttention as a bias): a rule reading one of these is not decided
    # on a guess, so not stated means unknown, not false; a file states it; a --no- flag wins
    assert getattr(resolve_workload(), key) is None
    f = tmp_path / "w.yaml"
    f.write_text(f"{key}: true\n")
    w = resolve_workload(workload_file=f)
    assert getattr(w, key) is True and key not in w.defaulted
    flag = key.replace("_", "-")
    assert getattr(resolve_workload(workload_file=f, flags=parse_workload_flags([f"--no-{flag}"])), key) is False


def test_alibi_custom_slopes_decide_te_1_9_s_context_parallel_alibi_assert() -> None:
    # sample-36 row 6: DotProductAttention.forward(alibi_slopes=...) makes TE 1.9 hand
    # FusedAttention a post_scale_bias, which its context-parallel assert on "alibi" lets through
    # (TE-FLASH-CP-ALIBI-ASSERT-TE1, TE-FUSED-CP-ALIBI-ASSERT-TE1 read workload.alibi_custom_slopes);
    # not stated, those rules read it as TE's own slopes
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    cat = load_catalogue(use_cache=False)
    base = {"packages": {"transformer-engine": "1.9.0", "flash-attn": "2.5.8"}, "gpu": "9.0", "cudnn": {"version": "9.1.0"}}
    wl = {"alibi": True, "mask": "no_mask", "context_parallel": {"size": 2, "comm_type": "p2p"}}
    for custom, want in ((None, "fired"), (False, "fired"), (True, "passed")):
        case = dict(base, workload=dict(wl, **({} if custom is None else {"alibi_custom_slopes": custom})))
        facts, workload = case_inputs(case)
        assert diagnose(cat, facts, workload).result("TE-FLASH-CP-ALIBI-ASSERT-TE1").status == want, custom


def test_bad_finetune_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("dtype: bf16\nfinetune: prefix\n")
    with pytest.raises(InputError) as exc:
        resolve_workload(workload_file=f)
    line = exc.value.one_line()
    assert line.startswith(f"{f}:2: workload: finetune='prefix': expected one of full, lora, qlora, adapter")
    assert "\n" not in line
    with pytest.raises(InputError) as exc:
        resolve_workload(flags=parse_workload_flags(["--finetune", "partial"]))
    assert "finetune='partial': expected one of full, lora, qlora, adapter" in exc.value.one_line()


@pytest.mark.parametrize("saved, want", [(True, True), (False, False), (None, None)])
def test_modernbert_deterministic_flash_attn_from_model_config(tmp_path: Path, saved, want) -> None:
    # ModernBERT saves config.deterministic_flash_attn; its flash-attention call passes it as
    # `deterministic` (HF-MODERNBERT-FA-DETERMINISTIC-FLAG); absent, the workload leaves it unstated
    cfg = {"model_type": "modernbert", "hidden_size": 768, "num_attention_heads": 12}
    if saved is not None:
        cfg["deterministic_flash_attn"] = saved
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert workload_from_model(tmp_path).get("deterministic_flash_attn") is want
    assert resolve_workload(model=tmp_path).deterministic_flash_attn is want


def test_softmax_type_is_a_workload_value_unknown_when_not_stated(tmp_path: Path) -> None:
    # sample-28 row 28: TE >= 2.8 filters its backends on DotProductAttention(softmax_type=...);
    # not stated it is unknown (a rule reading it is not evaluated), not vanilla
    assert resolve_workload().softmax_type is None
    f = tmp_path / "w.yaml"
    f.write_text("framework: megatron\nsoftmax_type: off_by_one\n")
    assert resolve_workload(workload_file=f).softmax_type == "off-by-one"
    got = resolve_workload(workload_file=f, flags=parse_workload_flags(["--softmax-type", "learnable"]))
    assert got.softmax_type == "learnable"
    with pytest.raises(InputError) as exc:
        resolve_workload(flags=parse_workload_flags(["--softmax-type", "sink"]))
    assert "softmax_type='sink': expected one of vanilla, off-by-one, learnable" in exc.value.one_line()


def test_a_nemo_gpt_oss_run_defaults_to_the_learnable_sink_its_config_sets(tmp_path: Path) -> None:
    # check-R7 of sample 28: NeMo's GPTOSSConfig sets softmax_type "learnable", so a NeMo GPT-OSS
    # run that states nothing hands TransformerEngine a sink; the default is listed as a default
    f = tmp_path / "w.yaml"
    f.write_text("framework: nemo\nmodel_type: gpt_oss\n")
    got = resolve_workload(workload_file=f)
    assert got.softmax_type == "learnable" and "softmax_type" in got.defaulted
    f.write_text("framework: nemo\nmodel_type: gpt_oss\nsoftmax_type: vanilla\n")
    assert resolve_workload(workload_file=f).softmax_type == "vanilla"
    f.write_text("framework: megatron\nmodel_type: gpt_oss\n")
    assert resolve_workload(workload_file=f).softmax_type is None


def test_axolotl_attention_keys_are_workload_values(tmp_path: Path) -> None:
    # sample-41 fix-C: what an axolotl config names, in axolotl's terms (the config reader sets them)
    assert resolve_workload().axolotl_attn is None and resolve_workload().axolotl_flash_flag is None
    f = tmp_path / "w.yaml"
    f.write_text("framework: axolotl\naxolotl_attn: kernels-community/flash-attn2\naxolotl_flash_flag: true\naxolotl_glm_dsa: false\n")
    w = resolve_workload(workload_file=f)
    assert (w.axolotl_attn, w.axolotl_flash_flag, w.axolotl_glm_dsa) == ("kernels-community/flash-attn2", True, False)
    assert resolve_workload(flags=parse_workload_flags(["--axolotl-attn", "none", "--no-axolotl-flash-flag"])).axolotl_flash_flag is False
    f.write_text("axolotl_attn: 'flash attention'\n")
    with pytest.raises(InputError) as exc:
        resolve_workload(workload_file=f)
    assert "axolotl_attn='flash attention'" in exc.value.one_line()


@pytest.mark.parametrize(
    "key, given, stored, bad",
    [
        # what AXOLOTL-ATTENTION-FLAGS-EXCLUSIVE reads: axolotl's legacy flags set true, comma-joined
        ("axolotl_flags", "flash_attention, flex_attention", "flash_attention,flex_attention", "flash"),
        # what FW-AXOLOTL-TRANSFORMERS-4-48 reads: axolotl's unsloth_* options set true, comma-joined
        ("axolotl_unsloth", "unsloth_lora_mlp, unsloth_rope", "unsloth_lora_mlp,unsloth_rope", "lora_mlp"),
    ],
)
def test_axolotl_key_lists_are_workload_values_checked_for_shape(tmp_path: Path, key: str, given: str, stored: str, bad: str) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(f"framework: axolotl\n{key}: {given}\n")
    assert getattr(resolve_workload(workload_file=f), key) == stored
    f.write_text(f"{key}: {bad}\n")
    with pytest.raises(InputError) as exc:
        resolve_workload(workload_file=f)
    assert key in exc.value.one_line() and "comma-separated" in exc.value.one_line()


def test_bad_method_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "b.yaml"
    bad.write_text("dtype: bf16\nmethod: dpo2\n")
    with pytest.raises(InputError) as e:
        resolve_workload(workload_file=bad)
    assert e.value.one_line().startswith(f"{bad}:2: workload: method='dpo2': expected one of sft, pt, dpo")
