"""`--config FILE`: each kind recognised by content and read into workload keys (or a package
list), with what was taken said in every output; malformed values are exit 2 naming file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest

from doctor.cli import main
from doctor.configs import read_config
from doctor.errors import InputError

DATA = Path(__file__).with_name("data")


@pytest.mark.parametrize(
    "name,kind,expected",
    [
        ("axolotl-qwen2.yaml", "axolotl", {"framework": "axolotl", "attn_implementation": "flash_attention_2", "packing": "varlen", "seq_len": 8192,
                                            "context_parallel": {"size": 4, "impl": "ring_flash_attn"}, "gradient_checkpointing": True}),
        ("llamafactory-sft.yaml", "llamafactory", {"framework": "llamafactory", "attn_implementation": "flash_attention_2", "packing": "padding_free",
                                                   "seq_len": 4096, "dtype": "bf16"}),
        ("accelerate-cp.yaml", "accelerate", {"framework": "accelerate", "dtype": "bf16", "context_parallel": {"size": 2, "impl": "torch_ring"}}),
        ("axolotl-llama-fsdp.yaml", "axolotl", {"framework": "axolotl", "attn_implementation": "sdpa", "distributed": "fsdp", "grad_accum_steps": 4}),
        ("ds-ulysses.json", "deepspeed", {"framework": "deepspeed", "dtype": "bf16", "context_parallel": {"size": 4, "impl": "ulysses"},
                                          "distributed": "deepspeed", "grad_accum_steps": 8}),
        ("torchtitan-llama3.toml", "torchtitan", {"framework": "torchtitan", "seq_len": 32768, "dtype": "bfloat16", "model_type": "llama",
                                                  "context_parallel": {"size": 4, "impl": "torch_ring", "comm_type": "all_gather"},
                                                  "model_compile": False}),
        ("megatron-args.txt", "megatron", {"framework": "megatron", "num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "seq_len": 8192, "dtype": "bf16",
                                           "tensor_parallel": 2, "context_parallel": {"size": 2, "impl": "te", "comm_type": "all_gather"}}),
        ("nemo-gpt.yaml", "nemo", {"framework": "nemo", "num_heads": 16, "num_kv_heads": 16, "head_dim": 128, "seq_len": 4096, "dtype": "bf16",
                                   "context_parallel": {"size": 2, "impl": "te", "comm_type": "p2p"}}),
        ("te-debug.log", "te-log", {"qkv_format": "thd", "qkv_packed": False, "num_heads": 32, "num_kv_heads": 8, "seq_len_q": 4096,
                                    "head_dim_qk": 128, "mask": "padding_causal", "window_size": [-1, 0], "dtype": "bf16", "training": True}),
    ],
)
def test_each_kind_is_recognised_and_read(name: str, kind: str, expected: Dict[str, Any]) -> None:
    got = read_config(DATA / name)
    assert got.kind == kind
    for key, value in expected.items():
        assert got.workload.get(key) == value, (key, got.workload.get(key))
    assert got.took and all(" -> " in t or "package" in t for t in got.took)


def test_torchtitan_model_compile_is_read(tmp_path: Path) -> None:
    # 0.1.0: [training] compile; 0.2.0+: [compile] enable with "model" in components (default
    # ["model", "loss"]); both off by default
    cfg = tmp_path / "titan.toml"
    for text, want in (
        ("[training]\nseq_len = 8192\ncompile = true\n", True),
        ("[training]\nseq_len = 8192\ncompile = false\n", False),
        ("[training]\nseq_len = 8192\n[compile]\nenable = true\n", True),
        ("[training]\nseq_len = 8192\n[compile]\nenable = true\ncomponents = [\"loss\"]\n", False),
        ("[training]\nseq_len = 8192\n[compile]\nenable = false\n", False),
        ("[training]\nseq_len = 8192\n", False),
    ):
        cfg.write_text("[model]\nname = \"llama3\"\n" + text)
        got = read_config(cfg)
        assert got.kind == "torchtitan" and got.workload["model_compile"] is want, text


def test_axolotl_gradient_accumulation_is_read_as_axolotl_reads_it(tmp_path: Path) -> None:
    # axolotl's schema defaults gradient_accumulation_steps to 1 before normalize_config runs, so
    # batch sizes alone mean 1 step; only an explicit null is derived as batch_size //
    # micro_batch_size (sample 26 row 15, and check-R2, which ran axolotl 0.6.0's schema)
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: mistralai/Mistral-7B-v0.1\ndeepspeed: deepspeed_configs/zero2.json\nmicro_batch_size: 2\nbatch_size: 16\n")
    got = read_config(cfg)
    assert got.kind == "axolotl" and "grad_accum_steps" not in got.workload
    cfg.write_text("base_model: x\nmicro_batch_size: 2\nbatch_size: 16\ngradient_accumulation_steps: null\n")
    got = read_config(cfg)
    assert got.workload["grad_accum_steps"] == 8
    assert "gradient_accumulation_steps: null -> batch_size // micro_batch_size -> grad_accum_steps=8" in got.took
    cfg.write_text("base_model: x\nmicro_batch_size: 2\ngradient_accumulation_steps: 4\n")
    assert read_config(cfg).workload["grad_accum_steps"] == 4
    # a malformed batch size is a clear error naming the key
    cfg.write_text("base_model: x\nmicro_batch_size: 2\nbatch_size: lots\ngradient_accumulation_steps: null\n")
    with pytest.raises(InputError, match="batch_size"):
        read_config(cfg)


def test_axolotl_attn_implementation_key_is_read(tmp_path: Path) -> None:
    # axolotl 0.17+ passes `attn_implementation:` to from_pretrained; 0.19 lists flash_attention_4
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: Qwen/Qwen3-8B\nattn_implementation: flash_attention_4\nsample_packing: true\nbf16: true\n")
    got = read_config(cfg)
    assert got.kind == "axolotl"
    assert got.workload["attn_implementation"] == "flash_attention_4" and got.workload["packing"] == "varlen"
    assert "attn_implementation: flash_attention_4 -> attn_implementation=flash_attention_4" in got.took
    # it wins over a legacy flag
    cfg.write_text("base_model: x\nattn_implementation: sdpa\nflash_attention: true\n")
    assert read_config(cfg).workload["attn_implementation"] == "sdpa"
    # axolotl's own backends and hub kernels are not transformers built-ins: noted, not read
    cfg.write_text("base_model: x\nattn_implementation: xformers\n")
    got = read_config(cfg)
    assert "attn_implementation" not in got.workload and any("xformers" in n for n in got.notes)


@pytest.mark.parametrize(
    "text,attn,flag,runtime",
    [
        # no attention key: 0.8-0.19 refuse context parallelism, 0.20+ take it; transformers' default runs
        ("", "none", False, None),
        # 0.8-0.16's check reads the flag only; 0.17+ take the key
        ("attn_implementation: flash_attention_2\n", "flash_attention_2", False, "flash_attention_2"),
        # the loaders (0.11+) and 0.17+'s flag priority take flex before flash
        ("flex_attention: true\nflash_attention: true\n", "flex_attention", True, "flex_attention"),
        # xformers comes first in 0.17+'s priority; it is axolotl's own backend, not a transformers one
        ("xformers_attention: true\n", "xformers", False, None),
        # the key beside a legacy flag: 0.17+ refuse it at config load; before, the flag passes the check
        ("flash_attention: true\nattn_implementation: sdpa\n", "conflict", True, "sdpa"),
        ("attn_implementation: kernels-community/flash-attn2\n", "kernels-community/flash-attn2", False, None),
        ("gemma4_hybrid_attn_impl: true\n", "flash_attention_2", False, None),
    ],
)
def test_axolotl_attention_keys_are_kept_in_axolotl_terms(tmp_path: Path, text: str, attn: str, flag: bool, runtime: Any) -> None:
    # sample-41 fix-C: axolotl's context-parallel check reads the flash_attention flag (0.8-0.16) or
    # the attn_implementation 0.17+ resolve; the reader is version-blind, so it keeps both
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: x\ncontext_parallel_size: 2\n" + text)
    got = read_config(cfg)
    assert got.workload["axolotl_attn"] == attn
    assert got.workload["axolotl_flash_flag"] is flag
    assert got.workload.get("attn_implementation") == runtime
    assert "axolotl_glm_dsa" not in got.workload


def test_axolotl_glm_dsa_kernels_need_the_kernels_plugin(tmp_path: Path) -> None:
    # use_glm_dsa_kernels is a KernelsArgs field (0.18.0 integrations/kernels/args.py:54): without
    # the plugin listed pydantic drops the key and the check runs
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: x\nattn_implementation: sdpa\nuse_glm_dsa_kernels: true\ncontext_parallel_size: 2\n")
    assert "axolotl_glm_dsa" not in read_config(cfg).workload
    cfg.write_text(cfg.read_text() + "plugins:\n  - axolotl.integrations.kernels.KernelsPlugin\n")
    assert read_config(cfg).workload["axolotl_glm_dsa"] is True


def test_axolotl_gradient_checkpointing_is_read(tmp_path: Path) -> None:
    # axolotl takes a boolean or "offload"/"offload_disk" (checkpointing with activation offload)
    cfg = tmp_path / "axolotl.yaml"
    for text, want in (("offload", True), ("offload_disk", True), ("false", False)):
        cfg.write_text(f"base_model: x\nsdp_attention: true\ngradient_checkpointing: {text}\n")
        assert read_config(cfg).workload["gradient_checkpointing"] is want, text
    cfg.write_text("base_model: x\nsdp_attention: true\ngradient_checkpointing: sometimes\n")
    with pytest.raises(InputError) as err:
        read_config(cfg)
    assert "gradient_checkpointing" in str(err.value) and err.value.line == 3


def test_workload_and_model_config_accept_flash_attention_4(tmp_path: Path) -> None:
    # transformers 5.4+ has attn_implementation="flash_attention_4"; a workload file and a
    # config.json's _attn_implementation name it
    from doctor.workload import load_workload_file, workload_from_model

    wl = tmp_path / "workload.yaml"
    wl.write_text("attn_implementation: flash_attention_4\n")
    assert load_workload_file(wl).attn_implementation == "flash_attention_4"
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"model_type": "llama", "num_attention_heads": 32, "hidden_size": 4096, "_attn_implementation": "flash_attention_4"}))
    assert workload_from_model(model)["attn_implementation"] == "flash_attention_4"


def test_megatron_attention_dropout_default_and_explicit(tmp_path: Path) -> None:
    # Megatron's --attention-dropout defaults to 0.1, which TE's FlashAttention 3/4 refuse
    assert read_config(DATA / "megatron-args.txt").workload.get("dropout") == 0.1
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --attention-dropout 0.0 --bf16\n")
    assert read_config(args).workload.get("dropout") == 0.0
    # NeMo YAML: only an explicit value is taken; an interpolation is left unread
    assert "dropout" not in read_config(DATA / "nemo-gpt.yaml").workload
    nemo = tmp_path / "nemo.yaml"
    nemo.write_text("model:\n  num_attention_heads: 8\n  attention_dropout: ${oc.env:DROP}\ntrainer:\n  precision: bf16\n")
    got = read_config(nemo)
    assert got.kind == "nemo" and "dropout" not in got.workload and any("attention_dropout" in n for n in got.notes)
    nemo.write_text("model:\n  num_attention_heads: 8\n  attention_dropout: 0.1\ntrainer:\n  precision: bf16\n")
    assert read_config(nemo).workload.get("dropout") == 0.1


def test_megatron_attention_backend_sets_the_nvte_switches_megatron_sets() -> None:
    got = read_config(DATA / "megatron-args.txt")
    assert dict(got.env) == {"NVTE_FLASH_ATTN": "0", "NVTE_FUSED_ATTN": "1", "NVTE_UNFUSED_ATTN": "0"}


def test_te_log_gives_versions_gpu_and_cudnn() -> None:
    got = read_config(DATA / "te-debug.log")
    assert got.packages == {"transformer-engine": "2.3.0", "flash-attn": "2.7.4.post1"}
    assert got.facts["cudnn"] == {"version": "9.8.0"} and got.facts["gpus"][0]["compute_capability"] == "9.0"


def test_te_1_11_log_gives_the_flash_attn_version_it_logs_as_an_object(tmp_path: Path) -> None:
    # TE 1.9-1.11 put the packaging Version object into the logged dict (attention.py@v1.11:92,315)
    text = (DATA / "te-debug.log").read_text().replace("'flash_attn_version': '2.7.4.post1'", "'flash_attn_version': <Version('2.2.5')>")
    assert "<Version('2.2.5')>" in text
    log = tmp_path / "te-1.11.log"
    log.write_text(text)
    assert read_config(log).packages["flash-attn"] == "2.2.5"


@pytest.mark.parametrize("recipe,dtype", [("fp8_dpa=True, fp8_mha=False", "fp8"), ("fp8_dpa=False, fp8_mha=False", "bf16")])
def test_te_log_of_an_fp8_run_says_whether_attention_runs_in_fp8(recipe: str, dtype: str, tmp_path: Path) -> None:
    """TE logs the bf16 inputs' dtype; with the recipe's fp8_dpa it runs attention in FP8, and the
    TE FP8 rules (TE-FLASH-FP8 ...) must see an FP8 workload."""
    line = (DATA / "te-debug.log").read_text().replace(
        "'fp8': False, 'fp8_meta': {'fp8_checkpoint': False, 'fp8_group': None}",
        f"'fp8': True, 'fp8_meta': {{'fp8_checkpoint': False, 'fp8_group': None, 'recipe': DelayedScaling(margin=0, fp8_format=HYBRID, {recipe})}}")
    assert "'fp8': True" in line
    log = tmp_path / "te-fp8.log"
    log.write_text(line)
    got = read_config(log)
    assert got.workload.get("dtype") == dtype and got.workload.get("fp8") is True


@pytest.mark.parametrize("name,packages", [
    ("requirements-freeze.txt", {"torch": "2.4.1", "transformer-engine": "1.13.0", "flash-attn": "2.6.3", "transformers": "4.44.2", "xtuner": "0.1.23", "deepspeed": "0.14.4"}),
    ("uv.lock", {"torch": "2.6.0", "flash-attn": "2.7.4.post1"}),
])
def test_package_lists(name: str, packages: Dict[str, str]) -> None:
    got = read_config(DATA / name)
    assert got.kind == "requirements" and dict(got.packages or {}) == packages


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--no-kernels", "--format", "json", *args])
    out = capsys.readouterr()
    return int(exc.value.code), (json.loads(out.out) if out.out.strip() else None), out.err


def test_a_package_list_is_checked_as_a_partial_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 002's stack from a pip freeze alone: XTuner 0.1.23 + transformers 4.44 is caught."""
    code, doc, _ = _check(capsys, "--config", str(DATA / "requirements-freeze.txt"), "--attn-implementation", "flash_attention_2")
    fired = {f["rule_id"] for f in doc["findings"] if f["status"] == "fired"}
    assert code == 1 and "XTUNER-01-TRANSFORMERS-FA-FORWARD" in fired
    assert any("pinned package" in n for n in doc["notes"])
    assert doc["call_path"]["framework"] == "xtuner" and "framework" in doc["call_path"]["inferred"]


def test_an_axolotl_config_naming_no_attention_meets_the_cp_check(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """sample-41 fix-C: axolotl 0.12 refuses context parallelism unless flash_attention is set; a
    config naming no attention reaches AXOLOTL-CP-NEEDS-FLASH-ATTENTION through the reader, and 0.20
    takes it."""
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: meta-llama/Llama-3.1-8B\ncontext_parallel_size: 2\nbf16: true\n")
    req = tmp_path / "requirements.txt"
    for axolotl, want in (("0.12.0", True), ("0.20.0", False)):
        req.write_text(f"axolotl=={axolotl}\ntransformers==4.55.0\nring-flash-attn==0.1.7\n")
        _, doc, _ = _check(capsys, "--config", str(cfg), "--config", str(req))
        fired = {f["rule_id"] for f in doc["findings"] if f["status"] == "fired"}
        assert ("AXOLOTL-CP-NEEDS-FLASH-ATTENTION" in fired) is want, (axolotl, sorted(fired))


def test_what_a_config_gave_is_in_every_format(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["--config", str(DATA / "megatron-args.txt"), "--config", str(DATA / "requirements-freeze.txt")]
    _, doc, _ = _check(capsys, *args)
    assert doc["workload"]["context_parallel"] == {"size": 2, "comm_type": "all_gather", "impl": "te", "attn_implementation": None}
    assert doc["call_path"]["cp_impl"] == "te" and doc["call_path"]["framework"] == "megatron"
    assert any("--attention-backend" in n or "attention_backend" in n for n in doc["notes"])
    for fmt in ("text", "markdown"):
        with pytest.raises(SystemExit):
            main(["check", "--no-kernels", "--format", fmt, *args])
        out = capsys.readouterr().out
        assert "megatron-args.txt (megatron) gave:" in out and "context_parallel_size -> context_parallel.size=2" in out


@pytest.mark.parametrize("text,suffix,message", [
    ("base_model: x\nsequence_len: -4\n", ".yaml", "sequence_len=-4: expected a positive integer"),
    ("model_name_or_path: x\nstage: sft\nflash_attn: fa9\n", ".yaml", "flash_attn='fa9'"),
    ('{"zero_optimization": {}, "sequence_parallel_size": "four"}', ".json", "sequence_parallel_size='four'"),
    ("[parallelism]\ncontext_parallel_degree = 2\ncontext_parallel_rotate_method = 'ring'\n", ".toml", "context_parallel_rotate_method='ring'"),
    ("--context-parallel-size 2 --cp-comm-type ring\n", ".txt", "cp_comm_type='ring'"),
    ("hello: world\n", ".yaml", "not a config attn-doctor recognises"),
    ("import os\n", ".py", "never executed"),
])
def test_malformed_configs_are_exit_2_naming_file_and_key(text: str, suffix: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"cfg{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(")):
        read_config(path)
    code, doc, err = _check(capsys, "--config", str(path))
    assert code == 2 and doc is None and str(path) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_yaml_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "axolotl.yaml"
    path.write_text("base_model: x\nsequence_len: 4096\nflash_attention: maybe\n", encoding="utf-8")
    with pytest.raises(InputError) as exc:
        read_config(path)
    assert exc.value.line == 3 and "flash_attention" in exc.value.message


def test_package_list_and_env_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    snap = Path(__file__).resolve().parents[2] / "docs" / "examples" / "seeds" / "002-xtuner-transformers.snapshot.json"
    code, _, err = _check(capsys, "--env", str(snap), "--config", str(DATA / "requirements-freeze.txt"))
    assert code == 2 and "cannot be combined with --env" in err




def test_accelerate_deepspeed_ulysses_reads_sp_size_and_the_wrapped_attention(tmp_path: Path) -> None:
    # accelerate 1.12+: sp_size with sp_backend deepspeed is DeepSpeed's Hugging Face Ulysses;
    # `accelerate launch` hands it sp_attn_implementation, sdpa when the config does not say
    cfg = tmp_path / "accelerate.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nmixed_precision: bf16\n"
                   "parallelism_config:\n  parallelism_config_sp_size: 4\n  parallelism_config_sp_backend: deepspeed\n")
    got = read_config(cfg)
    assert got.kind == "accelerate"
    assert got.workload["context_parallel"] == {"size": 4, "impl": "ulysses", "attn_implementation": "sdpa"}
    cfg.write_text("distributed_type: DEEPSPEED\nparallelism_config:\n  parallelism_config_sp_size: 2\n"
                   "  parallelism_config_sp_attn_implementation: flash_attention_2\n")
    assert read_config(cfg).workload["context_parallel"]["attn_implementation"] == "flash_attention_2"
    # a hub kernel name is not one of transformers' built-in names: noted, not read
    cfg.write_text("distributed_type: DEEPSPEED\nparallelism_config:\n  parallelism_config_sp_size: 2\n"
                   "  parallelism_config_sp_attn_implementation: kernels-community/flash-attn2\n")
    got = read_config(cfg)
    assert "attn_implementation" not in got.workload["context_parallel"] and any("not read" in n for n in got.notes)
    cfg.write_text("distributed_type: DEEPSPEED\nparallelism_config:\n  parallelism_config_sp_size: 2\n  parallelism_config_sp_backend: megatron\n")
    with pytest.raises(InputError, match="parallelism_config_sp_backend"):
        read_config(cfg)


def test_megatron_attention_backend_is_a_workload_fact(tmp_path: Path) -> None:
    # Megatron-Core 0.11+ asserts the NVTE_*_ATTN variables against --attention-backend, whose
    # default is auto: the backend is recorded (stated or default) next to the variables it sets
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --attention-backend fused --bf16\n")
    got = read_config(args)
    assert got.workload["attention_backend"] == "fused" and got.env["NVTE_FUSED_ATTN"] == "1"
    args.write_text("--num-attention-heads 32 --bf16\n")
    got = read_config(args)
    assert got.workload["attention_backend"] == "auto" and not got.env
    args.write_text("--num-attention-heads 32 --attention-backend local\n")
    assert read_config(args).workload["attention_backend"] == "local"


def test_megatron_flash_attention_version_switches_the_other_generations_off(tmp_path: Path) -> None:
    # Megatron-Core 0.19's --flash-attention-version N sets NVTE_FLASH_ATTN_V{other}=0 when the
    # model is built; TE 2.18+ reads them, so FA2 is out under "3" (sample 26 row 26)
    from doctor.rules.cases import case_inputs
    from doctor.rules.evaluate import diagnose
    from doctor.rules.loader import load_catalogue

    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --attention-backend flash --flash-attention-version 3 --bf16\n")
    got = read_config(args)
    assert dict(got.env) == {"NVTE_FLASH_ATTN": "1", "NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0",
                             "NVTE_FLASH_ATTN_V2": "0", "NVTE_FLASH_ATTN_V4": "0"}
    assert "flash_attention_version: 3 -> NVTE_FLASH_ATTN_V2=0 NVTE_FLASH_ATTN_V4=0" in got.took
    facts, wl = case_inputs({"packages": {"transformer-engine": "2.18.0", "flash-attn": "2.8.3", "megatron-core": "0.19.0"},
                             "gpu": "8.0", "env": dict(got.env), "workload": {"framework": "megatron", "attention_backend": "flash"}})
    d = diagnose(load_catalogue(), facts, wl)
    assert d.result("TE-FLASH-ENV-PER-VERSION").status == "fired"
    assert d.result("TE-NO-BACKEND").status == "fired"
    args.write_text("--num-attention-heads 32 --flash-attention-version 5\n")
    with pytest.raises(InputError, match="flash_attention_version"):
        read_config(args)


def test_megatron_retro_arguments_name_the_retro_model(tmp_path: Path) -> None:
    # pretrain_retro.py: --retro-add-retriever builds Megatron-Core's RetroModel, which forces the
    # unfused backend itself (MCORE-NVTE-ATTN-ENV-ASSERT's Retro arm); not with --use-legacy-models
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 16 --retro-add-retriever --retro-project-dir /data/retro --bf16\n")
    assert read_config(args).workload["model_type"] == "retro"
    args.write_text("--num-attention-heads 16 --retro-add-retriever --use-legacy-models\n")
    got = read_config(args)
    assert "model_type" not in got.workload and any("legacy" in n for n in got.notes)
    args.write_text("--num-attention-heads 16 --retro-project-dir /data/retro\n")
    assert "model_type" not in read_config(args).workload
    # RetroConfig overrides --attention-backend: its triple is not written over the shell's variables
    args.write_text("--num-attention-heads 16 --retro-add-retriever --attention-backend flash\n")
    got = read_config(args)
    assert got.workload["model_type"] == "retro" and not got.env and any("RetroConfig" in n for n in got.notes)
    assert not any(x.startswith("attention_backend: ") for x in got.took)


def test_megatron_fp8_format_and_nemo_fp8_set_the_fp8_autocast(tmp_path: Path) -> None:
    # TE 2.5.0 turns FusedAttention off for CP + MLA whenever FP8 autocast is on, FP8 attention or not
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --bf16 --fp8-format hybrid\n")
    assert read_config(args).workload.get("fp8") is True
    args.write_text("--num-attention-heads 32 --bf16\n")
    assert "fp8" not in read_config(args).workload
    nemo = tmp_path / "nemo.yaml"
    nemo.write_text("model:\n  num_attention_heads: 8\n  fp8: true\ntrainer:\n  precision: bf16\n")
    assert read_config(nemo).workload.get("fp8") is True
    args.write_text("--num-attention-heads 32 --fp8-format e5m2\n")
    with pytest.raises(InputError, match="expected e4m3 or hybrid"):
        read_config(args)


def test_nemo_fp8_interpolation_is_not_read_and_a_bad_value_names_its_key(tmp_path: Path) -> None:
    # a NeMo interpolation is left unread (as attention_dropout's), not refused as a bad format
    nemo = tmp_path / "nemo.yaml"
    nemo.write_text("model:\n  num_attention_heads: 8\n  fp8: ${oc.env:USE_FP8,false}\n")
    got = read_config(nemo)
    assert "fp8" not in got.workload
    nemo.write_text("model:\n  num_attention_heads: 8\n  fp8: e5m2\n")
    with pytest.raises(InputError, match="fp8='e5m2'"):
        read_config(nemo)


def test_verl_trainer_configs_give_verls_default_attention_and_ulysses(tmp_path: Path) -> None:
    # verl's FSDP workers load flash_attention_2 unless override_config names another attention
    got = read_config(DATA / "verl-ppo.yaml")
    assert got.kind == "verl"
    assert got.workload["attn_implementation"] == "flash_attention_2" and got.workload["packing"] == "varlen"
    assert got.workload["context_parallel"] == {"size": 2, "impl": "ulysses"} and got.workload["seq_len"] == 4096
    assert any("no attn_implementation configured" in t for t in got.took)
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text("actor_rollout_ref:\n  model:\n    use_remove_padding: true\n    override_config:\n      attn_implementation: sdpa\n"
                   "  actor:\n    ulysses_sequence_parallel_size: ${oc.env:SP,1}\n")
    got = read_config(cfg)
    assert got.workload["attn_implementation"] == "sdpa" and got.workload["packing"] == "padding_free"
    assert "context_parallel" not in got.workload
    assert any("interpolation" in n for n in got.notes) and any("before 0.6.1" in n for n in got.notes)
    # Megatron workers run Megatron-Core models: no transformers attention, no packing key
    cfg.write_text("actor_rollout_ref:\n  model:\n    use_remove_padding: true\n  actor:\n    strategy: megatron\n")
    got = read_config(cfg)
    assert got.workload["distributed"] == "megatron" and "attn_implementation" not in got.workload and "packing" not in got.workload
    # the SFT trainer's own keys
    cfg.write_text("data:\n  max_length: 2048\nmodel:\n  partial_pretrain: x\n  strategy: fsdp2\nulysses_sequence_parallel_size: 4\nuse_remove_padding: true\n")
    got = read_config(cfg)
    assert got.kind == "verl" and got.workload["seq_len"] == 2048 and got.workload["context_parallel"]["size"] == 4
    # a bad value names its key and line
    cfg.write_text("actor_rollout_ref:\n  actor:\n    strategy: tpu\n")
    with pytest.raises(InputError) as err:
        read_config(cfg)
    assert "strategy" in str(err.value) and err.value.line == 3


def test_verl_engine_strategies_and_hydra_defaults_and_fsdp_config_ulysses(tmp_path: Path) -> None:
    # verl 0.9.1 has torchtitan and VeOmni engines too: a valid strategy, no HF attention read
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text("actor_rollout_ref:\n  model:\n    use_remove_padding: true\n  actor:\n    strategy: veomni\n")
    got = read_config(cfg)
    assert got.kind == "verl" and "attn_implementation" not in got.workload and "packing" not in got.workload
    assert any("veomni" in n for n in got.notes)
    # ppo_megatron_trainer.yaml picks Megatron workers through Hydra defaults, with no actor.strategy
    cfg.write_text("defaults:\n  - actor@actor_rollout_ref.actor: megatron_actor\n  - _self_\n"
                   "actor_rollout_ref:\n  model:\n    use_remove_padding: true\n")
    got = read_config(cfg)
    assert got.workload["distributed"] == "megatron" and "attn_implementation" not in got.workload
    cfg.write_text("defaults:\n  - ppo_trainer\n  - override model_engine: megatron\n  - _self_\nactor_rollout_ref:\n  model: {}\n")
    assert read_config(cfg).workload["distributed"] == "megatron"
    # the engine workers' Ulysses key (fsdp_config) when the deprecated actor-level one is 1
    cfg.write_text("actor_rollout_ref:\n  actor:\n    ulysses_sequence_parallel_size: 1\n    fsdp_config:\n      ulysses_sequence_parallel_size: 4\n")
    got = read_config(cfg)
    assert got.workload["context_parallel"] == {"size": 4, "impl": "ulysses"} and got.workload["attn_implementation"] == "flash_attention_2"
    # the actor-level size > 1 wins (0.9.1 copies it into fsdp_config)
    cfg.write_text("actor_rollout_ref:\n  actor:\n    ulysses_sequence_parallel_size: 2\n    fsdp_config:\n      ulysses_sequence_parallel_size: 4\n")
    got = read_config(cfg)
    assert got.workload["context_parallel"]["size"] == 2 and "packing" not in got.workload
    # verl's remove-padding default flipped to true at 0.7.0: an unset key is noted, not guessed
    assert any("use_remove_padding is not set" in n for n in got.notes)


@pytest.mark.parametrize("layout,interleaved", [("th3d", True), ("t3hd", False), ("sbh3d", True), ("bs3hd", False), ("thd_thd_thd", None)])
def test_te_log_layout_says_how_a_packed_qkv_was_split(layout: str, interleaved: Any, tmp_path: Path) -> None:
    # TE 1.x's packed-thd FP8 kernel takes only t3hd: th3d (TE's default interleaved split) must be told apart
    text = (DATA / "te-debug.log").read_text().replace("'qkv_layout': 'thd_thd_thd'", f"'qkv_layout': '{layout}'")
    log = tmp_path / "te.log"
    log.write_text(text)
    got = read_config(log)
    assert got.workload.get("qkv_weight_interleaved") == interleaved
    assert got.workload["qkv_packed"] == (interleaved is not None)


def test_an_exported_nvte_variable_is_kept_over_what_megatron_would_set(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Megatron-Core sets NVTE_*_ATTN (and, 0.19+, NVTE_FLASH_ATTN_V*) only where they are not
    exported, and asserts an exported value equals its own: a contradicting export in the checked
    environment stops the model build, so it must not be overwritten by the config's values."""
    snap = tmp_path / "snap.yaml"
    base = ("schema_version: 1\npackages: {megatron-core: \"%s\", transformer-engine: \"2.18.0\", torch: \"2.9.0\"}\n"
            "torch: {version: \"2.9.0\", cuda: \"12.8\"}\ngpus: [{index: 0, name: H100, compute_capability: \"9.0\"}]\nenv: %s\n")
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --attention-backend flash --bf16\n")

    def fired(version: str, env: str) -> Any:
        snap.write_text(base % (version, env))
        _, doc, _ = _check(capsys, "--env", str(snap), "--config", str(args))
        return doc, {f["rule_id"] for f in doc["findings"] if f["status"] == "fired"}

    doc, got = fired("0.14.0", "{NVTE_FUSED_ATTN: \"1\"}")
    assert "MCORE-NVTE-ATTN-ENV-ASSERT" in got
    assert any("NVTE_FUSED_ATTN is exported as '1'" in n for n in doc["notes"])
    assert "MCORE-NVTE-ATTN-ENV-ASSERT" not in fired("0.14.0", "{NVTE_FUSED_ATTN: \"0\"}")[1]
    assert "MCORE-NVTE-ATTN-ENV-ASSERT" not in fired("0.14.0", "{}")[1]
    # --flash-attention-version 2 on 0.19: an exported NVTE_FLASH_ATTN_V3=1 is asserted against
    args.write_text("--num-attention-heads 32 --attention-backend flash --flash-attention-version 2 --bf16\n")
    assert "MCORE-NVTE-ATTN-ENV-ASSERT" in fired("0.19.0", "{NVTE_FLASH_ATTN_V3: \"1\"}")[1]
    assert "MCORE-NVTE-ATTN-ENV-ASSERT" not in fired("0.19.0", "{NVTE_FLASH_ATTN_V3: \"0\"}")[1]


def test_megatron_softmax_type_is_read(tmp_path: Path) -> None:
    # Megatron-Core 0.15+ --softmax-type reaches TE's DotProductAttention(softmax_type=...)
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 64 --softmax-type learnable --bf16\n")
    assert read_config(args).workload["softmax_type"] == "learnable"
    args.write_text("--num-attention-heads 64 --bf16\n")
    assert "softmax_type" not in read_config(args).workload
    args.write_text("--num-attention-heads 64 --softmax-type sink --bf16\n")
    with pytest.raises(InputError):
        read_config(args)


def test_a_nemo_1_yaml_without_a_backend_reads_as_auto(tmp_path: Path) -> None:
    """A NeMo YAML is a NeMo 1 model config, whose default attention backend is auto: it must not
    be taken for NeMo 2's per-family flash default (a Gemma YAML would then skip Megatron-Core's
    NVTE_* assert); a stated backend is kept."""
    nemo = tmp_path / "nemo.yaml"
    nemo.write_text("model:\n  num_attention_heads: 8\ntrainer:\n  precision: bf16\n")
    assert read_config(nemo).workload.get("attention_backend") == "auto"
    nemo.write_text("model:\n  num_attention_heads: 8\n  attention_backend: flash\ntrainer:\n  precision: bf16\n")
    assert read_config(nemo).workload.get("attention_backend") == "flash"


@pytest.mark.parametrize(
    "text,flags",
    [
        ("", "none"),
        ("flash_attention: true\n", "flash_attention"),
        # in the reader's fixed order whatever the config's order; false flags are not counted
        ("flex_attention: true\nflash_attention: true\nsdp_attention: false\n", "flash_attention,flex_attention"),
        ("s2_attention: true\nflash_attention: 'true'\n", "s2_attention,flash_attention"),
    ],
)
def test_axolotl_legacy_flags_are_listed_for_the_one_flag_check(tmp_path: Path, text: str, flags: str) -> None:
    # axolotl 0.8.1-0.16 refuse a config with more than one of their attention flags
    # (AXOLOTL-ATTENTION-FLAGS-EXCLUSIVE reads the list per release)
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: x\n" + text)
    assert read_config(cfg).workload["axolotl_flags"] == flags



@pytest.mark.parametrize(
    "text,unsloth",
    [
        ("", "none"),
        ("unsloth_lora_mlp: true\n", "unsloth_lora_mlp"),
        # in the reader's fixed order whatever the config's order; false or null options are not counted
        ("unsloth_rope: true\nunsloth_cross_entropy_loss: true\nunsloth_rms_norm: false\nunsloth_lora_o: null\n",
         "unsloth_cross_entropy_loss,unsloth_rope"),
    ],
)
def test_axolotl_unsloth_options_are_listed(tmp_path: Path, text: str, unsloth: str) -> None:
    # axolotl 0.7.0-0.16.x load monkeypatch/unsloth_.py (which imports LlamaFlashAttention2) for
    # these options (FW-AXOLOTL-TRANSFORMERS-4-48 reads the list)
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: x\n" + text)
    assert read_config(cfg).workload["axolotl_unsloth"] == unsloth


def test_check_reports_axolotls_refusal_of_two_attention_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """sample-41 check-C: axolotl 0.8.1-0.16 stop at config load when two attention flags are true;
    0.17 takes the first in its order, and one flag alone passes."""
    cfg = tmp_path / "axolotl.yaml"
    req = tmp_path / "requirements.txt"
    for flags, axolotl, want in (("flex_attention: true\nflash_attention: true\n", "0.16.1", True),
                                 ("flex_attention: true\nflash_attention: true\n", "0.17.0", False),
                                 ("flash_attention: true\n", "0.16.1", False)):
        cfg.write_text("base_model: meta-llama/Llama-3.1-8B\nbf16: true\n" + flags)
        req.write_text(f"axolotl=={axolotl}\ntransformers==4.55.0\n")
        code, doc, _ = _check(capsys, "--config", str(cfg), "--config", str(req))
        fired = {f["rule_id"] for f in doc["findings"] if f["status"] == "fired"}
        assert ("AXOLOTL-ATTENTION-FLAGS-EXCLUSIVE" in fired) is want, (flags, axolotl, sorted(fired))
        if want:
            assert code == 1


def test_megatron_legacy_models_leave_the_nvte_variables_alone(tmp_path: Path) -> None:
    # --use-legacy-models builds megatron.legacy's GPTModel, which never runs Megatron-Core's
    # check of the NVTE_*_ATTN variables: the config states the legacy model and writes no variable
    # for --attention-backend (nor the default auto the check would have asserted against)
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --use-legacy-models --attention-backend fused --bf16\n")
    got = read_config(args)
    assert got.workload["legacy_models"] is True
    assert "attention_backend" not in got.workload and not got.env
    assert any("--use-legacy-models" in n for n in got.notes)
    args.write_text("--num-attention-heads 32 --use-legacy-models\n")
    got = read_config(args)
    assert got.workload["legacy_models"] is True and "attention_backend" not in got.workload
    args.write_text("--num-attention-heads 32 --attention-backend fused\n")
    got = read_config(args)
    assert "legacy_models" not in got.workload and got.env["NVTE_FUSED_ATTN"] == "1"



def test_megatron_deterministic_mode_is_a_deterministic_run(tmp_path: Path) -> None:
    # --deterministic-mode makes Megatron-LM turn torch's deterministic algorithms on, which TE's
    # backend filters read, and Megatron-Core's TE layer then wants NVTE_ALLOW_NONDETERMINISTIC_ALGO=0
    args = tmp_path / "args.txt"
    args.write_text("--num-attention-heads 32 --deterministic-mode --bf16\n")
    got = read_config(args)
    assert got.workload["deterministic"] is True
    args.write_text("--num-attention-heads 32 --bf16\n")
    assert "deterministic" not in read_config(args).workload
    nemo = tmp_path / "nemo.yaml"
    nemo.write_text("model:\n  num_attention_heads: 8\n  deterministic_mode: true\ntrainer:\n  precision: bf16\n")
    got = read_config(nemo)
    assert got.kind == "nemo" and got.workload["deterministic"] is True
