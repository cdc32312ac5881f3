"""``engine.files.output_files``: a name under ``/proc``, ``/sys`` or ``/dev`` is no output (a kernel view, not a
drive), also through a symlink; a device there is still named as the device it is; a directory that cannot
be made is one ``OutputError`` (``make_output_dir``)."""
from __future__ import annotations

import pytest

from engine.errors import OutputError
from engine.files.output_files import check_output_dir, check_output_file, make_output_dir


@pytest.mark.parametrize("check", [check_output_file, check_output_dir, make_output_dir])
@pytest.mark.parametrize("path,root", [("/proc/self/x", "/proc"), ("/sys/x", "/sys"), ("/dev/wp-x", "/dev")])
def test_a_name_under_a_kernel_file_system_is_refused(tmp_path, check, path, root):
    with pytest.raises(OutputError, match=f"--out {path} is under {root}, not on a drive"):
        check(path, "--out")
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(OutputError, match=f"is under {root}"):
        check(link, "--out")


def test_dev_shm_is_an_ordinary_place(tmp_path):
    check_output_file("/dev/shm/wp-not-there", "--out")
    check_output_dir("/dev/shm/wp-not-there", "--out")


def test_a_device_is_still_named_as_one():
    with pytest.raises(OutputError, match="is a character device, not a regular file"):
        check_output_file("/dev/null", "--out")


def test_a_directory_that_cannot_be_made_is_one_error(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError, match="cannot make --out .*/f/d: Not a directory"):
        make_output_dir(tmp_path / "f" / "d", "--out")
    make_output_dir(tmp_path / "a" / "b", "--out")
    assert (tmp_path / "a" / "b").is_dir()
