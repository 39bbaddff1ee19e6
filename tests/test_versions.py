"""doctor.versions reads names, versions, specifiers and pins as packaging does (it avoids
importing packaging.utils / packaging.specifiers at start, so the equivalence is tested here)."""

from __future__ import annotations

import itertools

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from doctor.errors import InputError
from doctor.model import Pin
from doctor.versions import canonical_name, is_version, parse_pin, validate_spec, version_matches

NAMES = ["flash_attn", "Flash-Attn", "transformer.engine", "nvidia-cudnn-cu12", "Transformer__Engine", "torch", "A.B-C_D", "xformers"]
VERSIONS = ["2.5.8", "2.6", "2.6.0", "2.6.3", "2.7.4.post1", "2.8.0rc1", "1.13.0", "2.0.0", "2.1", "9.1.0.70", "3.0.0b2", "2.6.0.dev20240101"]
SPECS = [">=2.6", "<2.6", ">=2.6,<2.7", "==2.6.*", "!=2.6.*", "~=2.6", "~=2.6.1", "==2.6.3", "!=2.6.3", "<=2.7.4.post1", ">2.5.8", ">=9.3", "<1.14,>=1.9"]


@pytest.mark.parametrize("name", NAMES)
def test_names_normalise_like_packaging(name: str) -> None:
    assert canonical_name(name) == canonicalize_name(name)


@pytest.mark.parametrize("version,spec", list(itertools.product(VERSIONS, SPECS)))
def test_specifiers_match_like_packaging(version: str, spec: str) -> None:
    assert validate_spec(spec) is None
    assert version_matches(version, spec) == SpecifierSet(spec).contains(Version(version), prereleases=True)


def test_local_labels_and_ngc_builds_match_as_their_release() -> None:
    assert version_matches("2.4.0+cu121", "<=2.4.0")
    assert version_matches("2.3.0a0+6ddf5cf.nv24.04", ">=2.3,<2.4")
    assert not version_matches("latest", ">=0")


def test_labelled_betas_are_betas_not_their_release() -> None:
    from doctor.versions import version_verdict

    # flash-attn-3's dated wheels: a beta with a build label is still the beta
    fa3 = "3.0.0b1+20250911.cu128torch280"
    assert version_matches(fa3, "<3.0.0rc0") and not version_matches(fa3, ">=3.0.0")
    # bounded at 3.0.0 itself, whether it has the change is unknown, as for the unlabelled beta
    assert version_verdict(fa3, ">=3.0.0") is None and version_verdict("3.0.0b1", ">=3.0.0") is None
    # an a0 build with a label (NGC, torch source builds) stays the release it ships as
    assert version_verdict("2.5.0a0+git1234", ">=2.5,<2.6") is True


def test_pins_are_values() -> None:
    assert parse_pin("Flash_Attn==2.5.8") == Pin("flash-attn", "2.5.8")
    pin = parse_pin("transformer-engine[PyTorch]==2.1.0")
    assert pin == Pin("transformer-engine", "2.1.0", ("pytorch",)) and str(pin) == "transformer-engine[pytorch]==2.1.0"
    for bad in ("flash-attn>=2.5", "flash-attn", "==2.5.8", "flash-attn==latest"):
        with pytest.raises(InputError, match="expected NAME==VERSION"):
            parse_pin(bad)


def test_is_version_takes_pep440_and_ngc_forms_only() -> None:
    assert is_version("2.3.0a0+6ddf5cf.nv24.04") and is_version("2.7.4.post1+cu12torch2.6")
    assert not any(is_version(x) for x in ("latest", "abc", "", "2.x"))


def test_labelled_snapshots_still_match_as_their_release() -> None:
    # b7921dc narrowed "a labelled pre-release is its release" to X.Y.Za0+label and so dropped the
    # labelled .devN snapshots: a torch nightly matched neither >=2.6 nor <2.6 in version_matches
    # (what `version:` operators, callpath and fix plans use)
    nightly = "2.6.0.dev20241112+cu124"
    assert version_matches(nightly, ">=2.6") and not version_matches(nightly, "<2.6")
    assert version_matches("2.9.0.dev0+g1a2b3c", ">=2.9,<2.10")
    # the labelled beta or rc stays the pre-release (b7921dc's point)
    assert not version_matches("2.8.0rc1+cu128", ">=2.8")
