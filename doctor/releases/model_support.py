"""Which attention implementations a transformers model family declares, by release: the
`models` table of rules/evidence/transformers_attention.json (written from the released wheels by
tools/hf_attention_facts.py; the seeded tests read the same file's `releases` table).

Each family lists the releases where its set of implementations changed; the answer for an
installed transformers is the newest of those at or below it. Loaded once, on first use.
"""

from __future__ import annotations

import bisect
import json
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from packaging.version import Version

from doctor.versions import release, version_matches

_Points = Tuple[List[Version], List[Optional[Tuple[str, ...]]]]


@lru_cache(maxsize=1)
def _loaded() -> Tuple[Dict[str, _Points], Version]:
    """The `models` table by family, and the oldest release the table was written from (its
    `releases` table); read once."""
    from doctor.resources import rules_dir

    try:
        doc = json.loads((rules_dir() / "evidence" / "transformers_attention.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, Version("999")
    out: Dict[str, _Points] = {}
    for family, points in (doc.get("models") or {}).items():
        rows = sorted((Version(v), None if impls is None else tuple(impls)) for v, impls in points.items())
        out[family] = ([v for v, _ in rows], [i for _, i in rows])
    releases = [Version(v) for v in (doc.get("releases") or {})]
    return out, min(releases) if releases else Version("999")


def _table() -> Dict[str, _Points]:
    return _loaded()[0]


def _first_release() -> Version:
    """The oldest transformers release the table was written from."""
    return _loaded()[1]


def model_supports(transformers: Optional[str], model_type: Optional[str], attention: Optional[str]) -> Optional[bool]:
    """True/False when the family's classes in that transformers release declare `attention`;
    None when the release, the family or the attention is unknown (or the family is not in
    that release)."""
    if not transformers or not model_type or not attention:
        return None
    if attention == "flash_attention_4":
        # 5.4+ lets any FlashAttention version through the one merged `_supports_flash_attn`
        # flag (_flash_attn_can_dispatch), which the table records as flash_attention_3 from
        # 4.54; a model that picks its attention class from a `*_ATTENTION_CLASSES` dict has no
        # key for FA4 either (the FA3 rows of REFUSED_BY_MODEL). Before 5.4 there is no FA4 at
        # all (HF-FA4-NEEDS-5-4 says so), which is no statement about the model.
        if not version_matches(transformers, ">=5.4"):
            return None
        attention = "flash_attention_3"
    have = release(transformers)
    points = _table().get(FOLDER_OF_MODEL_TYPE.get(model_type, model_type))
    if have is None or points is None:
        return None
    at = bisect.bisect_right(points[0], have) - 1
    impls = points[1][at] if at >= 0 else None
    if impls is None:
        return None
    if attention in impls and _refused_by_model(transformers, model_type, attention):
        return False
    return attention in impls


def model_in_release(transformers: Optional[str], model_type: Optional[str]) -> Optional[bool]:
    """Does this transformers release have the model family? True at or after the family's first
    row in the table; False before it where that row is later than the table's first release (the
    table holds every release from there, so its first row is the release that added the family:
    qwen2_moe 4.40.0, gemma2 4.42.0, qwen3 4.51.0); None where the release or family is not known,
    or the family's row there says nothing (removed, or older than the table)."""
    if not transformers or not model_type:
        return None
    have = release(transformers)
    points = _table().get(FOLDER_OF_MODEL_TYPE.get(model_type, model_type))
    if have is None or points is None or not points[0]:
        return None
    at = bisect.bisect_right(points[0], have) - 1
    if at < 0:
        return False if points[0][0] > _first_release() else None
    return None if points[1][at] is None else True


# The table is keyed by the models/<folder> name; model_types that live in another family's folder.
FOLDER_OF_MODEL_TYPE = {"gemma3_text": "gemma3"}

# Refusals the class flags do not show, found by tools/hf_oracle.py (docs/hf-oracle/
# disagreements.md): (model_type, implementations, transformers releases, upstream source).
_TF = "https://github.com/huggingface/transformers/blob/"
REFUSED_BY_MODEL: Tuple[Tuple[str, Tuple[str, ...], str, str], ...] = (
    # The class flag passes the request, but the model still picks its attention class from a
    # `*_ATTENTION_CLASSES` dict with no key for it: KeyError while the model is built. The
    # merged `_supports_flash_attn` flag (4.54) passes FA3 to such dicts; 4.48 set
    # `_supports_flex_attn` on two families whose dicts had no flex entry (gone again in 4.49).
    ("qwen2_moe", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/qwen2_moe/modeling_qwen2_moe.py"),
    ("olmoe", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/olmoe/modeling_olmoe.py"),
    ("phimoe", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/phimoe/modeling_phimoe.py"),
    ("dbrx", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/dbrx/modeling_dbrx.py"),
    ("falcon", ("flash_attention_3",), ">=4.54,<5.23", _TF + "v5.22.2/src/transformers/models/falcon/modeling_falcon.py"),
    ("gptj", ("flash_attention_3",), ">=4.54,<5.23", _TF + "v5.22.2/src/transformers/models/gptj/modeling_gptj.py"),
    ("gpt_neo", ("flash_attention_3",), ">=4.54,<5.23", _TF + "v5.22.2/src/transformers/models/gpt_neo/modeling_gpt_neo.py"),
    # Same KeyError, found by a wheel scan (modeling file sets `_supports_flash_attn = True` and
    # indexes `*_ATTENTION_CLASSES[config._attn_implementation]` with no FA3 key; every transformers
    # wheel 4.53.0-5.23.0 read) and confirmed by building the model on CPU with the FA3 checks
    # stubbed (4.55.4, 4.57.1, 5.12.1): the windows end where the dict lookup went away.
    ("bark", ("flash_attention_3",), ">=4.54,<5.23", _TF + "v5.22.2/src/transformers/models/bark/modeling_bark.py"),
    # diffllama already set `_supports_flash_attn_3 = True` in 4.53 (its dict had no FA3 key either)
    ("diffllama", ("flash_attention_3",), ">=4.53,<5.13", _TF + "v5.12.1/src/transformers/models/diffllama/modeling_diffllama.py"),
    ("kyutai_speech_to_text", ("flash_attention_3",), ">=4.54,<5.13", _TF + "v5.12.1/src/transformers/models/kyutai_speech_to_text/modeling_kyutai_speech_to_text.py"),
    ("mimi", ("flash_attention_3",), ">=4.54,<5.13", _TF + "v5.12.1/src/transformers/models/mimi/modeling_mimi.py"),
    ("moshi", ("flash_attention_3",), ">=4.54,<5.13", _TF + "v5.12.1/src/transformers/models/moshi/modeling_moshi.py"),
    ("nemotron", ("flash_attention_3",), ">=4.54,<5.13", _TF + "v5.12.1/src/transformers/models/nemotron/modeling_nemotron.py"),
    ("distilbert", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/distilbert/modeling_distilbert.py"),
    ("jamba", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/jamba/modeling_jamba.py"),
    ("jetmoe", ("flash_attention_3",), ">=4.54,<5.0", _TF + "v4.57.1/src/transformers/models/jetmoe/modeling_jetmoe.py"),
    ("esm", ("flash_attention_3",), ">=4.54,<4.56", _TF + "v4.55.4/src/transformers/models/esm/modeling_esm.py"),
    ("olmoe", ("flex_attention",), ">=4.48,<4.49", _TF + "v4.48.3/src/transformers/models/olmoe/modeling_olmoe.py"),
    ("phimoe", ("flex_attention",), ">=4.48,<4.49", _TF + "v4.48.3/src/transformers/models/phimoe/modeling_phimoe.py"),
    # GptOssConfig's attn_implementation setter accepts only the vllm-flash-attn3 hub kernel
    # (5.3 replaced it with `_compatible_flash_implementations`, which redirects instead). The
    # setter is in the 5.0.0rc2 and rc3 wheels already (not in rc0/rc1), which ">=5.0" leaves out.
    ("gpt_oss", ("flash_attention_2", "flash_attention_3"), ">=5.0.0rc2,<5.3", _TF + "v5.0.0/src/transformers/models/gpt_oss/configuration_gpt_oss.py"),
)


def _refused_by_model(transformers: str, model_type: str, attention: str) -> bool:
    from doctor.versions import version_matches

    return any(mt == model_type and attention in impls and version_matches(transformers, spec) for mt, impls, spec, _ in REFUSED_BY_MODEL)
