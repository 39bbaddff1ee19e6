"""JSON Schema for rule files (rules/**/*.yaml and --rules-dir files).

A rule file is a mapping with `frameworks` (what each attention framework offers and how it
picks a backend) and/or `rules` (facts that disable a backend, or findings to report).
Unknown keys are errors everywhere. Conditions are data: `all` / `any` / `not` over leaf
predicates from a closed operator set (doctor/rules/conditions.py); nothing is evaluated.
"""

from __future__ import annotations

from typing import Any, Dict

from doctor.model import STAGES

_scalar: Dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
_compare_props: Dict[str, Any] = {
    "eq": _scalar,
    "ne": _scalar,
    "lt": {"type": ["string", "number"]},
    "le": {"type": ["string", "number"]},
    "gt": {"type": ["string", "number"]},
    "ge": {"type": ["string", "number"]},
    "in": {"type": "array", "items": _scalar, "minItems": 1},
    "not_in": {"type": "array", "items": _scalar, "minItems": 1},
    "version": {"type": "string", "minLength": 1},
    "matches": {"type": "string", "minLength": 1},
    "is_set": {"type": "boolean"},
    "multiple_of": {"type": "integer", "minimum": 1},
}
# not an operator: the leaf's value where its fact cannot be read (instead of unknown), for an
# exclusion that should not leave a rule undecided on reports without that fact (docs/rules.md)
_fact_props: Dict[str, Any] = {**_compare_props, "if_unknown": {"type": "boolean"}}


def _leaf(key: str, extra: Dict[str, Any]) -> Dict[str, Any]:
    props = {key: {"type": "string", "minLength": 1}, **extra}
    return {
        "type": "object",
        "required": [key],
        "properties": props,
        "additionalProperties": False,
        "minProperties": 2,
    }


CONDITION: Dict[str, Any] = {
    "oneOf": [
        {
            "type": "object",
            "required": ["all"],
            "properties": {"all": {"type": "array", "items": {"$ref": "#/$defs/condition"}, "minItems": 1}},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["any"],
            "properties": {"any": {"type": "array", "items": {"$ref": "#/$defs/condition"}, "minItems": 1}},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["not"],
            "properties": {"not": {"$ref": "#/$defs/condition"}},
            "additionalProperties": False,
        },
        # if_unknown only next to an operator
        {**_leaf("fact", _fact_props), "not": {"required": ["if_unknown"], "maxProperties": 2}},
        {**_leaf("env", _fact_props), "not": {"required": ["if_unknown"], "maxProperties": 2}},
        _leaf(
            "package",
            # compare: plain -- the version as a framework's own check orders it (transformers'
            # require_version, packaging's < and >): 0.18.0rc0 < 0.18.0, pre-releases not set apart
            {"version": {"type": "string", "minLength": 1}, "installed": {"type": "boolean"}, "compare": {"enum": ["plain"]}},
        ),
        # `available_but_for: [RULE-ID, ...]`: the backend is out, and only these of its rules put
        # it out (a fix that undoes them, such as an env variable, then makes it available)
        # `out_for: [RULE-ID, ...]`: the backend is out, and at least one of these rules is among
        # those that put it out (a caller that runs the kernel anyway hits that refusal)
        _leaf("backend", {"available": {"type": "boolean"}, "selected": {"type": "boolean"},
                          "available_but_for": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                          "out_for": {"type": "array", "items": {"type": "string"}, "minItems": 1}}),
        _leaf("framework", {"has_backend": {"type": "boolean"}, "selects": {"type": "string"}}),
        # another finding's verdict (finding rules only): `{finding: FA-IMPORT-FAILS, fired: false}` --
        # this failure happens only where that one does not stop the run first
        {**_leaf("finding", {"fired": {"type": "boolean"}, "if_unknown": {"type": "boolean"}}), "required": ["finding", "fired"]},
        # a named condition of the catalogue (a file's `conditions:`), written once and read by
        # rules in any file: `{condition: hub_kernels_usable}`
        {
            "type": "object",
            "required": ["condition"],
            "properties": {"condition": {"type": "string", "minLength": 1}},
            "additionalProperties": False,
        },
    ],
}

NAMED_CONDITION: Dict[str, Any] = {
    "type": "object",
    "required": ["id", "description", "when"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[a-z][a-z0-9_]*$"},
        "description": {"type": "string", "minLength": 10},
        "when": {"$ref": "#/$defs/condition"},
        "sources": {"type": "array", "items": {"type": "string", "pattern": r"^https?://"}},
    },
    "additionalProperties": False,
}

_str_list = {"type": "array", "items": {"type": "string", "minLength": 1}}

FIX: Dict[str, Any] = {
    "type": "object",
    "required": ["description"],
    "properties": {
        "description": {"type": "string", "minLength": 1},
        "pins": _str_list,
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "config": _str_list,
        "workload": {"type": "object"},
        "cost": {"type": "string"},
        # where this fix applies (e.g. {fact: platform.os, eq: linux}); not offered where false
        "when": {"$ref": "#/$defs/condition"},
    },
    "additionalProperties": False,
}

TEST_CASE: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "gpu": {"type": "string", "pattern": r"^\d+\.\d+$"},
        # a released version (PEP 440, local labels allowed): a stray quote or a name is a typo
        "packages": {"type": "object", "additionalProperties": {"type": "string", "pattern": r"^[0-9][0-9A-Za-z.+!_-]*$"}},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "torch": {"type": "object"},
        "cuda": {"type": "object"},
        "cudnn": {"type": "object"},
        "gpus": {"type": "array"},
        "imports": {"type": "object"},
        "contracts": {"type": "object"},
        "python": {"type": "object"},
        "platform": {"type": "object"},
        # each installed package's Requires-Dist on other installed ones, as the probe records it
        "requires": {"type": "object", "additionalProperties": _str_list},
        "workload": {"type": "object"},
        # fires cases only: the indices of the rule's fixes offered for this case (exactly those)
        "offers": {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True},
    },
    "additionalProperties": False,
}

# An assertion about one released artifact (a wheel or sdist on PyPI), evaluated by the
# developer tool tools/evidence.py on every release; see docs/evidence.md.
ASSERTION: Dict[str, Any] = {
    "type": "object",
    "required": ["file"],
    "properties": {
        # a glob inside the artifact (`*` crosses folders), or a list of them
        "file": {
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            ]
        },
        "regex": {"type": "string", "minLength": 1},
        "absent": {"type": "string", "minLength": 1},
        "literal": {"type": "string", "minLength": 1},
        "function": {"type": "string", "minLength": 1},
        "required_param": {"type": "string", "minLength": 1},
        "param": {"type": "string", "minLength": 1},
        "no_param": {"type": "string", "minLength": 1},
        "class": {"type": "string", "minLength": 1},
        "method": {"type": "string", "minLength": 1},
        "no_method": {"type": "string", "minLength": 1},
    },
    "additionalProperties": False,
    "oneOf": [
        {"required": ["regex"]},
        {"required": ["absent"]},
        {"required": ["literal"]},
        {"required": ["function"]},
        {"required": ["class"]},
    ],
}

EVIDENCE: Dict[str, Any] = {
    "type": "object",
    "required": ["package", "range", "all"],
    "properties": {
        "package": {"type": "string", "minLength": 1},
        "repo": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"},  # read release tags there, not PyPI
        "range": {"type": "string", "minLength": 1},  # releases where all assertions hold
        "scan": {"type": "string", "minLength": 1},  # releases to evaluate (default: every final release)
        "within": {"type": "boolean"},  # true: hold on every release in `range`, may hold outside too
        "all": {"type": "array", "items": ASSERTION, "minItems": 1},
        "note": {"type": "string"},
    },
    "additionalProperties": False,
}

RULE: Dict[str, Any] = {
    "type": "object",
    "required": ["id", "title", "message", "when", "sources", "tests"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[A-Z0-9][A-Z0-9-]*[A-Z0-9]$"},
        "severity": {"enum": ["error", "warning", "info"]},
        "disables": {"type": "string", "pattern": r"^[a-z0-9_]+\.[a-z0-9_]+$"},
        # backend rules: the backend does not exist here (not built into this torch, not in this
        # release); where it fires, the backend's other filters are not why it is out and stay silent
        "absent": {"type": "boolean"},
        "area": {"type": "string"},
        "title": {"type": "string", "minLength": 1},
        "message": {"type": "string", "minLength": 1},
        "when": {"$ref": "#/$defs/condition"},
        "fixes": {"type": "array", "items": FIX},
        "sources": {"type": "array", "items": {"type": "string", "pattern": r"^https?://"}, "minItems": 1},
        "kernels": _str_list,
        "silent_wrong_results": {"type": "boolean"},
        # where in the run the failure shows (doctor.model.STAGES); findings only
        "stage": {"enum": [st.name for st in STAGES]},
        "evidence": {"type": "array", "items": EVIDENCE, "minItems": 1},
        "confidence": {"enum": ["inferred"]},
        "confidence_note": {"type": "string", "minLength": 1},
        # other error findings that may fire on the same inputs as this one, each with why both are
        # true there (tests/rules/test_fails_first.py requires it for every fires case)
        "alongside": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["rule", "why"],
                "properties": {"rule": {"type": "string", "minLength": 1}, "why": {"type": "string", "minLength": 10}},
                "additionalProperties": False,
            },
        },
        "tests": {
            "type": "object",
            "required": ["fires", "passes"],
            "properties": {
                "fires": {"type": "array", "items": TEST_CASE, "minItems": 1},
                "passes": {"type": "array", "items": TEST_CASE, "minItems": 1},
            },
            "additionalProperties": False,
        },
    },
    "oneOf": [{"required": ["severity"]}, {"required": ["disables"]}],
    "dependentRequired": {"confidence": ["confidence_note"], "confidence_note": ["confidence"], "absent": ["disables"], "stage": ["severity"]},
    "additionalProperties": False,
}

_BACKEND_ID = {"type": "string", "pattern": r"^[a-z0-9_]+\.[a-z0-9_]+$"}

# A member of a backend family (TE's FlashAttention 2, 3 and 4 inside `te.flash`): its own
# `installed` condition and its own `disables:` rules; never selected on its own.
MEMBER: Dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "installed"],
    "properties": {
        "id": _BACKEND_ID,
        "name": {"type": "string", "minLength": 1},
        "installed": {"$ref": "#/$defs/condition"},
    },
    "additionalProperties": False,
}

# How a family is composed from its members, per release: the first entry whose `when` holds
# applies. The family is available when no rule disables the family itself, every member in
# `requires` is installed, and at least one member in `any_of` is available.
COMPOSE: Dict[str, Any] = {
    "type": "object",
    "required": ["any_of"],
    "properties": {
        "when": {"$ref": "#/$defs/condition"},
        "any_of": {"type": "array", "items": _BACKEND_ID, "minItems": 1},
        "requires": {"type": "array", "items": _BACKEND_ID, "minItems": 1},
        "note": {"type": "string"},
    },
    "additionalProperties": False,
}

BACKEND: Dict[str, Any] = {
    "type": "object",
    "required": ["id", "name"],
    "properties": {
        "id": _BACKEND_ID,
        "name": {"type": "string"},
        "installed": {"$ref": "#/$defs/condition"},
        "cost": {"type": "string"},
        "members": {"type": "array", "items": MEMBER, "minItems": 2},
        "compose": {"type": "array", "items": COMPOSE, "minItems": 1},
    },
    "dependentRequired": {"members": ["compose"], "compose": ["members"]},
    "additionalProperties": False,
}

FRAMEWORK: Dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "installed", "backends", "selection", "sources"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]*$"},
        "name": {"type": "string"},
        "installed": {"$ref": "#/$defs/condition"},
        "backends": {"type": "array", "items": BACKEND, "minItems": 1},
        "selection": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["order"],
                "properties": {
                    "when": {"$ref": "#/$defs/condition"},
                    "order": _str_list,
                    "note": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        # the oldest release of the framework's package whose selection the catalogue checks:
        # below it no rule that disables one of its backends is evaluated (doctor.rules.evaluate)
        "covers": {
            "type": "object",
            "required": ["package", "since", "why"],
            "properties": {
                "package": {"type": "string"},
                "since": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)*$"},
                "why": {"type": "string"},
            },
            "additionalProperties": False,
        },
        # what stops the run before the framework picks a backend: findings about its choice
        # are reached only where this does not hold (doctor.rules.loader._guard_selection)
        "reached_unless": {"$ref": "#/$defs/condition"},
        # what stops the run before the framework's backend filters run (facts only, no findings):
        # its backend rules stay silent where this holds (doctor.rules.loader._guard_filters)
        "filters_reached_unless": {"$ref": "#/$defs/condition"},
        "sources": {"type": "array", "items": {"type": "string", "pattern": r"^https?://"}, "minItems": 1},
    },
    "additionalProperties": False,
}

RULE_FILE: Dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "frameworks": {"type": "array", "items": FRAMEWORK},
        "rules": {"type": "array", "items": RULE},
        "conditions": {"type": "array", "items": NAMED_CONDITION},
    },
    "additionalProperties": False,
    "minProperties": 1,
    "$defs": {"condition": CONDITION},
}
