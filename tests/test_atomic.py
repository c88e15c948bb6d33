"""operant.shared.atomic: a replaced file is whole or untouched, and nothing is left behind."""

from __future__ import annotations

import json
import os

import pytest

from operant.shared import atomic


def test_each_variant_replaces_the_file_with_its_content(tmp_path):
    path = tmp_path / "out"
    atomic.write_bytes(path, b"\x00bytes")
    assert path.read_bytes() == b"\x00bytes"
    atomic.write_text(path, "text é\n")
    assert path.read_text(encoding="utf-8") == "text é\n"
    atomic.write_json(path, {"a": [1, 2]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ]\n}\n'
    assert json.loads(path.read_text()) == {"a": [1, 2]}
    assert os.listdir(tmp_path) == ["out"]


def test_a_streaming_writer_beats_on_every_write_and_at_the_slow_steps(tmp_path):
    beats = []
    path = tmp_path / "stream"

    def write(handle):
        handle.write(b"one ")
        handle.write(b"two")
        handle.flush()

    atomic.write_with(path, write, beat=lambda: beats.append(1))
    assert path.read_bytes() == b"one two"
    assert len(beats) == 4  # two writes, before the fsync, after the rename


@pytest.mark.parametrize("failure", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failure_leaves_the_old_file_and_no_temporary_file(tmp_path, failure):
    path = tmp_path / "kept"
    path.write_text("old content\n")

    def write(handle):
        handle.write(b"half of the new ")
        raise failure

    with pytest.raises(type(failure)):
        atomic.write_with(path, write)
    assert path.read_text() == "old content\n"
    assert os.listdir(tmp_path) == ["kept"]


def test_a_leftover_of_a_process_with_our_pid_is_replaced(tmp_path):
    path = tmp_path / "file"
    atomic.temporary_path(path).write_bytes(b"left by a dead writer")
    atomic.write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["file"]


def test_temporary_names_map_back_to_the_file_they_replace(tmp_path):
    tmp = atomic.temporary_path(tmp_path / "ckpt-000000001.pt")
    assert tmp.parent == tmp_path and tmp.name == f".ckpt-000000001.pt.{os.getpid()}.tmp"
    assert atomic.final_name(tmp.name) == "ckpt-000000001.pt"
    assert atomic.final_name(".latest.42.tmp") == "latest"
    assert atomic.final_name("ckpt-000000001.pt") is None
    assert atomic.final_name(".hidden") is None


def test_new_files_get_the_mode_less_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        atomic.write_bytes(tmp_path / "file", b"x")
    finally:
        os.umask(previous)
    assert (tmp_path / "file").stat().st_mode & 0o777 == 0o644


def test_a_symlink_is_replaced_atomically(tmp_path):
    link = tmp_path / "latest"
    atomic.replace_symlink(link, "run-a")
    atomic.replace_symlink(link, "run-b")
    assert os.readlink(link) == "run-b"
    assert sorted(os.listdir(tmp_path)) == ["latest"]
