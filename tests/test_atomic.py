"""Atomic writes: the target holds the old content or the new, never a part, and no temporary file stays behind."""

from __future__ import annotations

import pytest

from tracec.atomic import atomic_open, write_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "records.jsonl"
    write_atomic(target, ["old\n"])

    def chunks():
        yield "new, first half\n"
        raise RuntimeError("the writer crashed")

    with pytest.raises(RuntimeError, match="crashed"):
        write_atomic(target, chunks())
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["records.jsonl"]


def test_a_finished_write_replaces_the_target_and_creates_folders(tmp_path):
    target = tmp_path / "deep" / "out.bin"
    with atomic_open(target, "wb") as handle:
        handle.write(b"\x00\x01")
        assert not target.exists()  # nothing is visible before the block ends
    assert target.read_bytes() == b"\x00\x01"
    assert [p.name for p in target.parent.iterdir()] == ["out.bin"]


@pytest.mark.parametrize(
    ("target", "error"),
    [("folder", IsADirectoryError), ("a_file/out.jsonl", NotADirectoryError),
     ("a_file/deeper/out.jsonl", NotADirectoryError)],
)
def test_an_impossible_target_is_named_in_the_error_and_nothing_is_left(tmp_path, target, error):
    (tmp_path / "folder").mkdir()
    (tmp_path / "a_file").write_text("keep\n")
    with pytest.raises(error) as raised:
        write_atomic(tmp_path / target, ["x\n"])
    assert raised.value.filename == str(tmp_path / target)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a_file", "folder"]
    assert (tmp_path / "a_file").read_text() == "keep\n"
