"""How the sandbox shows a host /etc file, decided on a fake filesystem: a link into a system
root the sandbox shows stays a link; a link elsewhere, or one that leads into such a root
only through another place, is bound as its content; nothing there, nothing shown. (The
time zone's name read in a real sandbox: ``tests/sandbox/test_etc_links.py``.)"""

from __future__ import annotations

from pyfakefs.fake_filesystem import FakeFilesystem

from sandbox_profiles.model import Mount
from sandbox_profiles.profile import _bind_etc


def _mounts(path: str) -> list[Mount]:
    mounts: list[Mount] = []
    _bind_etc(path, mounts)
    return mounts


def test_a_link_into_usr_stays_a_link(fs: FakeFilesystem) -> None:
    fs.create_file("/usr/share/zoneinfo/Europe/Paris", contents="TZif")
    fs.create_symlink("/etc/localtime", "/usr/share/zoneinfo/Europe/Paris")
    fs.create_symlink("/etc/relative", "../usr/share/zoneinfo/Europe/Paris")
    assert [(m.kind, m.dest, m.source) for m in _mounts("/etc/localtime")] == [
        ("symlink", "/etc/localtime", "/usr/share/zoneinfo/Europe/Paris")
    ]
    assert [(m.kind, m.source) for m in _mounts("/etc/relative")] == [
        ("symlink", "../usr/share/zoneinfo/Europe/Paris")
    ]


def test_a_link_elsewhere_or_dangling_is_bound_as_its_content(fs: FakeFilesystem) -> None:
    fs.create_file("/var/lib/tz/zone", contents="TZif")
    fs.create_symlink("/etc/localtime", "/var/lib/tz/zone")  # not shown in the sandbox
    fs.create_symlink("/etc/timezone", "/usr/share/missing")
    fs.create_file("/usr/share/zoneinfo/UTC", contents="TZif")
    fs.create_symlink("/var/tz", "/usr/share/zoneinfo/UTC")
    fs.create_symlink("/etc/localzone", "/var/tz")  # leads into /usr, through /var
    assert [(m.kind, m.source) for m in _mounts("/etc/localzone")] == [
        ("ro-bind", "/etc/localzone")
    ]
    fs.create_file("/etc/os-release", contents="ID=debian")
    assert [(m.kind, m.source) for m in _mounts("/etc/localtime")] == [
        ("ro-bind", "/etc/localtime")
    ]
    assert _mounts("/etc/timezone") == []  # nothing there: nothing to show
    assert [(m.kind, m.source) for m in _mounts("/etc/os-release")] == [
        ("ro-bind", "/etc/os-release")
    ]
    assert _mounts("/etc/absent") == []
