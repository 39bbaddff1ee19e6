"""Every source of every shipped rule and framework points at something that does not move: a
file at a release tag or commit (GitHub, or a Hugging Face Hub file at a full commit hash), an
issue or pull request, a release, or a PyPI release page of one version. A branch (`main`, `master`, ...) is not a source: what it says changes."""

from __future__ import annotations

import re
from typing import Iterator, Tuple

import pytest

from doctor.rules.loader import load_catalogue

BRANCHES = {"main", "master", "develop", "dev", "trunk", "nightly", "HEAD", "viable", "stable"}
GITHUB = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(?P<kind>[\w-]+)/(?P<rest>.+)$")
PINNED_GITHUB_KINDS = {"issues", "pull", "discussions", "commit", "compare", "releases", "security"}
PYPI = re.compile(r"^https://pypi\.org/project/[\w.-]+/[\w.!+-]+/(#\w+)?$")
# a Hugging Face Hub file at a full commit hash (a checkpoint's own modeling code) does not move
HF_HUB = re.compile(r"^https://huggingface\.co/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/.+$")
# Vendor documents that have no tagged copy; each is named on purpose.
VENDOR_DOCS = (
    "https://docs.nvidia.com/deploy/cuda-compatibility/",
    "https://docs.nvidia.com/cuda/blackwell-compatibility-guide/",
    "https://docs.nvidia.com/cuda/cuda-c-programming-guide/",
    # one CUDA release's archived documents (the release is in the path: they do not move)
    "https://docs.nvidia.com/cuda/archive/",
)


def problem(url: str) -> str:
    """Why `url` is not a pinned source ('' when it is)."""
    if url.startswith(VENDOR_DOCS) or PYPI.match(url) or HF_HUB.match(url):
        return ""
    m = GITHUB.match(url)
    if m is None:
        return "not a GitHub file at a tag, an issue/PR, or a PyPI release page"
    kind, rest = m.group("kind"), m.group("rest")
    if kind in PINNED_GITHUB_KINDS:
        return ""
    if kind in ("blob", "tree", "raw"):
        ref = rest.split("/", 1)[0]
        if ref in BRANCHES or not re.search(r"\d", ref):
            return f"points at the branch {ref!r}, which moves: use a release tag or a commit"
        return ""
    return f"GitHub page of kind {kind!r}"


def sources() -> Iterator[Tuple[str, str]]:
    cat = load_catalogue(use_cache=False)
    for rule in cat.rules:
        for url in rule.sources:
            yield rule.id, url
    for fw in cat.frameworks:
        for url in fw.sources:
            yield f"framework {fw.id}", url


def test_every_source_is_pinned_to_a_release_tag_commit_or_thread() -> None:
    bad = [f"{who}: {url} ({problem(url)})" for who, url in sources() if problem(url)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("url,ok", [
    ("https://github.com/NVIDIA/TransformerEngine/blob/v2.18/transformer_engine/pytorch/attention.py", True),
    ("https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp", False),
    ("https://github.com/Dao-AILab/flash-attention/tree/master/csrc", False),
    ("https://github.com/huggingface/transformers/blob/1a2b3c4d/src/x.py", True),
    ("https://github.com/NVIDIA/TransformerEngine/issues/1236", True),
    ("https://github.com/pytorch/pytorch/pull/145602", True),
    ("https://pypi.org/project/torch/2.6.0/", True),
    ("https://pypi.org/project/torch/", False),
    ("https://example.com/blog/attention", False),
    ("https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/3a811845d89f3c1b3f41b341d0f9f05104769f35/modeling_phi3.py", True),
    ("https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/modeling_phi3.py", False),
])
def test_the_check_tells_pinned_from_moving_sources(url: str, ok: bool) -> None:
    assert (problem(url) == "") is ok
