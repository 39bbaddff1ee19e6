"""The requirements/constraints writer: what it keeps, what it replaces, and that a failed
write leaves the old file as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from doctor.errors import WriteError
from doctor.fix.pinfile import HEADER, Pinned, render_pinfile, write_pinfile
from doctor.model import Pin

FA = Pinned(Pin("flash-attn", "2.5.9.post1"), ("TE-CP-FLASH-ATTN-SOFTCAP",))
TF = Pinned(Pin("transformers", "4.42.4"), ("XTUNER-01-TRANSFORMERS-FA-FORWARD",))


def test_replaces_in_place_keeping_extras_markers_and_comments() -> None:
    old = (
        "# training stack\n"
        "numpy>=1.26\n"
        "Flash_Attn[triton]==2.6.3 ; python_version >= '3.9'  # needed by TE\n"
        "torch==2.4.1\n"
    )
    new, warnings = render_pinfile(old, [FA])
    assert new == (
        "# training stack\n"
        "numpy>=1.26\n"
        'Flash_Attn[triton]==2.5.9.post1 ; python_version >= "3.9"  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP; needed by TE\n'
        "torch==2.4.1\n"
    )
    assert warnings == []


def test_hashes_are_dropped_with_a_warning() -> None:
    old = "flash-attn==2.6.3 \\\n    --hash=sha256:aaaa \\\n    --hash=sha256:bbbb\nnumpy==1.26.4 --hash=sha256:cccc\n"
    new, warnings = render_pinfile(old, [FA])
    assert new == "flash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\nnumpy==1.26.4 --hash=sha256:cccc\n"
    assert len(warnings) == 1 and "--hash" in warnings[0] and "regenerate" in warnings[0]


def test_new_pins_are_appended_under_one_header_and_rerunning_changes_nothing() -> None:
    old = "numpy\n# end"  # no trailing newline
    once, _ = render_pinfile(old, [FA, TF])
    assert once == (
        "numpy\n# end\n\n" + HEADER + "\n"
        "flash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\n"
        "transformers==4.42.4  # attn-doctor: XTUNER-01-TRANSFORMERS-FA-FORWARD\n"
    )
    twice, _ = render_pinfile(once, [FA, TF])
    assert twice == once
    # A later plan with another version replaces the managed line, still in place.
    later, _ = render_pinfile(once, [Pinned(Pin("flash-attn", "2.5.8"), ("TE-CP-FLASH-ATTN-SOFTCAP",)), TF])
    assert "flash-attn==2.5.8  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\n" in later and later.count(HEADER) == 1


def test_crlf_files_stay_crlf() -> None:
    old = "# pins\r\ntorch==2.4.1\r\nflash-attn==2.6.3\r\n"
    new, _ = render_pinfile(old, [FA, TF])
    assert "\n" not in new.replace("\r\n", "")
    assert new.startswith("# pins\r\ntorch==2.4.1\r\nflash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\r\n")
    assert new.endswith("transformers==4.42.4  # attn-doctor: XTUNER-01-TRANSFORMERS-FA-FORWARD\r\n")


def test_options_urls_and_includes_are_untouched_and_included_pins_reported(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("-c more.txt\ntransformers==4.44.2\n", encoding="utf-8")
    (tmp_path / "more.txt").write_text("flash-attn<2.7\n", encoding="utf-8")
    old = "--index-url https://pypi.org/simple\n-r base.txt\n./vendor/thing.whl\ngit+https://example.org/x.git#egg=x\n"
    new, warnings = render_pinfile(old, [FA, TF], base_dir=tmp_path)
    assert new.startswith(old)
    assert any("transformers is also required in base.txt" in w for w in warnings)
    assert any("flash-attn is also required in more.txt" in w for w in warnings)


def test_constraints_files_carry_no_extras() -> None:
    new, warnings = render_pinfile("flash-attn[triton]==2.6.3\n", [FA], constraints=True)
    assert new == "flash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\n"
    assert any("extras" in w for w in warnings)


def test_missing_file_is_created(tmp_path: Path) -> None:
    path = tmp_path / "requirements-attn.txt"
    result = write_pinfile(path, [FA])
    assert result.written and result.backup is None
    assert path.read_text(encoding="utf-8") == HEADER + "\nflash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\n"
    assert result.diff.startswith("--- /dev/null")


def test_update_writes_a_backup_keeps_the_mode_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_bytes(b"torch==2.4.1\r\nflash-attn==2.6.3\r\n")
    os.chmod(path, 0o640)
    first = write_pinfile(path, [FA])
    assert first.written and first.backup == tmp_path / "requirements.txt.bak"
    assert first.backup.read_bytes() == b"torch==2.4.1\r\nflash-attn==2.6.3\r\n"
    assert path.read_bytes() == b"torch==2.4.1\r\nflash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\r\n"
    assert (path.stat().st_mode & 0o777) == 0o640
    second = write_pinfile(path, [FA])
    assert not second.changed and not second.written and second.diff == ""
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_dry_run_shows_the_diff_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("flash-attn==2.6.3\n", encoding="utf-8")
    result = write_pinfile(path, [FA], dry_run=True)
    assert not result.written
    assert "-flash-attn==2.6.3\n+flash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\n" in result.diff
    assert path.read_text(encoding="utf-8") == "flash-attn==2.6.3\n"
    assert not (tmp_path / "requirements.txt.bak").exists()
    assert not write_pinfile(tmp_path / "new.txt", [FA], dry_run=True).written
    assert not (tmp_path / "new.txt").exists()


def test_a_path_under_a_regular_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(WriteError) as exc:
        write_pinfile(blocker / "requirements.txt", [FA])
    assert "is not a directory" in exc.value.one_line()
    assert blocker.read_text(encoding="utf-8") == "x"


def test_a_failed_write_leaves_the_old_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root can write anywhere, so make the final rename fail."""
    path = tmp_path / "requirements.txt"
    path.write_text("flash-attn==2.6.3\n", encoding="utf-8")

    def no_rename(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(WriteError) as exc:
        write_pinfile(path, [FA])
    assert "the old file, if any, is unchanged" in exc.value.one_line()
    assert path.read_text(encoding="utf-8") == "flash-attn==2.6.3\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_directory_or_binary_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WriteError):
        write_pinfile(tmp_path, [FA])
    blob = tmp_path / "blob.txt"
    blob.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WriteError):
        write_pinfile(blob, [FA])
    assert blob.read_bytes() == b"\xff\xfe\x00"


def test_device_files_are_refused_and_symlinks_followed(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(WriteError, match="not a regular file"):
        write_pinfile(fifo, [Pinned(Pin("flash-attn", "2.5.8"), ("R",))])
    assert fifo.is_fifo()
    real = tmp_path / "real.txt"
    real.write_text("numpy==1.26.4\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_pinfile(link, [Pinned(Pin("flash-attn", "2.5.8"), ("R",))])
    assert link.is_symlink() and "flash-attn==2.5.8" in real.read_text() and "numpy==1.26.4" in real.read_text()


# ---------------------------------------------------------------- newcomer review D10, m18


def test_an_editable_line_for_the_pinned_package_is_replaced_with_a_warning(tmp_path: Path) -> None:
    te = Pinned(Pin("transformer-engine", "2.17.0"), ("TE-NO-BACKEND",))
    path = tmp_path / "requirements.txt"
    path.write_text("-e git+https://github.com/NVIDIA/TransformerEngine.git@v2.3#egg=transformer_engine[pytorch]\n-e ./local-pkg\nnumpy\n", encoding="utf-8")
    result = write_pinfile(path, [te])
    text = path.read_text(encoding="utf-8")
    assert text == "transformer_engine[pytorch]==2.17.0  # attn-doctor: TE-NO-BACKEND\n-e ./local-pkg\nnumpy\n"
    assert [w for w in result.warnings if "editable install (-e git+https://github.com/NVIDIA/TransformerEngine.git@v2.3" in w and "2.17.0" in w]
    assert "#egg=transformer_engine" in (tmp_path / "requirements.txt.bak").read_text(encoding="utf-8")


def test_a_read_only_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("flash-attn==2.6.3\n", encoding="utf-8")
    os.chmod(path, 0o444)
    with pytest.raises(WriteError) as exc:
        write_pinfile(path, [FA])
    assert exc.value.exit_code == 2
    assert "read-only" in exc.value.one_line() and str(path) in exc.value.one_line()
    assert path.read_text(encoding="utf-8") == "flash-attn==2.6.3\n"
    assert (path.stat().st_mode & 0o777) == 0o444
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requirements.txt"]


def test_a_hard_linked_file_is_written_through_so_both_names_see_the_pins(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("flash-attn==2.6.3\n", encoding="utf-8")
    other = tmp_path / "shared-requirements.txt"
    os.link(path, other)
    result = write_pinfile(path, [FA])
    assert other.read_text(encoding="utf-8") == path.read_text(encoding="utf-8") == "flash-attn==2.5.9.post1  # attn-doctor: TE-CP-FLASH-ATTN-SOFTCAP\n"
    assert os.path.samefile(path, other)
    assert result.backup is not None and result.backup.read_text(encoding="utf-8") == "flash-attn==2.6.3\n"
    assert any("hard links" in w for w in result.warnings)


def test_an_existing_backup_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    (tmp_path / "requirements.txt.bak").write_text("my own backup\n", encoding="utf-8")
    path.write_text("flash-attn==2.6.3\n", encoding="utf-8")
    first = write_pinfile(path, [FA])
    assert first.backup == tmp_path / "requirements.txt.bak.1"
    path.write_text("flash-attn==2.6.0\n", encoding="utf-8")
    second = write_pinfile(path, [FA])
    assert second.backup == tmp_path / "requirements.txt.bak.2"
    assert (tmp_path / "requirements.txt.bak").read_text(encoding="utf-8") == "my own backup\n"
    assert (tmp_path / "requirements.txt.bak.1").read_text(encoding="utf-8") == "flash-attn==2.6.3\n"
    assert (tmp_path / "requirements.txt.bak.2").read_text(encoding="utf-8") == "flash-attn==2.6.0\n"
