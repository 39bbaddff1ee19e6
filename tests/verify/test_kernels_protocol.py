"""The worker's JSON-lines protocol, with its self-test backends (no torch needed)."""

from __future__ import annotations

NO_TORCH = {"ATTN_DOCTOR_WORKER_SELFTEST": "1", "ATTN_DOCTOR_WORKER_NO_TORCH": "1"}


def _case(cid: str, backend: str) -> dict:
    return {"id": cid, "backend": backend, "direction": "fwd"}


def test_events_come_in_protocol_order(worker) -> None:
    doc = {"protocol": 1, "cases": [_case("a", "selftest.pass"), _case("b", "selftest.fail")]}
    events = worker(doc, NO_TORCH)
    kinds = [e["event"] for e in events]
    assert kinds == ["hello", "env", "start", "result", "start", "result", "done"]
    results = [e for e in events if e["event"] == "result"]
    assert [(r["id"], r["status"]) for r in results] == [("a", "passed"), ("b", "failed")]
    assert results[1]["max_rel_error"] == 6.2
    assert all("seconds" in r for r in results)


def test_library_chatter_on_stdout_does_not_break_the_protocol(worker) -> None:
    doc = {"protocol": 1, "cases": [_case("noisy", "selftest.print"), _case("b", "selftest.pass")]}
    events = worker(doc, NO_TORCH)
    assert [e["event"] for e in events][-1] == "done"
    assert [e["status"] for e in events if e["event"] == "result"] == ["passed", "passed"]


def test_refusal_is_reported_as_unsupported_with_its_message(worker) -> None:
    events = worker({"protocol": 1, "cases": [_case("r", "selftest.raise")]}, NO_TORCH)
    (res,) = [e for e in events if e["event"] == "result"]
    assert res["status"] == "unsupported"
    assert "refused by selftest" in res["detail"]


def test_unknown_protocol_version_is_an_error_event(worker) -> None:
    events = worker({"protocol": 99, "cases": []}, NO_TORCH)
    assert events[-1]["event"] == "error"
    assert "protocol 99" in events[-1]["detail"]


def test_native_stderr_warnings_join_the_refusal_message(worker) -> None:
    """c10 prints some refusal reasons to fd 2 instead of raising Python warnings."""
    events = worker({"protocol": 1, "cases": [_case("w", "selftest.cwarn")]}, NO_TORCH)
    (res,) = [e for e in events if e["event"] == "result"]
    assert res["status"] == "unsupported"
    assert res["detail"] == ("forward: RuntimeError: No available kernel. Aborting execution. | "
                             "Flash attention requires q,k,v to have the same last dimension")


def test_long_refusals_keep_the_reason_at_their_end(worker) -> None:
    events = worker({"protocol": 1, "cases": [_case("l", "selftest.longerror")]}, NO_TORCH)
    (res,) = [e for e in events if e["event"] == "result"]
    assert len(res["detail"]) < 2000
    assert res["detail"].endswith("is not supported because: the real reason")
