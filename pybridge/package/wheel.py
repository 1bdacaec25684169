"""Write a wheel (PEP 427) with the ``wheel`` package's ``WheelFile``, which hashes every file into
RECORD; METADATA (core metadata 2.1) and WHEEL are written here."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from email.message import Message
from pathlib import Path

from ..distribution import compatible_requirement, install_hint
from .errors import PackageError


def runtime_requirements() -> list[str]:
    """pybridge's run time: this pybridge or a later compatible one (docs/versioning.md), and a cffi
    no older than the one that generated the extensions."""
    import cffi

    major_minor = ".".join(cffi.__version__.split(".")[:2])
    return [compatible_requirement(), "numpy>=1.23", f"cffi>={major_minor}"]


def metadata(name: str, version: str, license: str, summary: str) -> str:
    m = Message()
    m["Metadata-Version"] = "2.1"
    m["Name"] = name
    m["Version"] = version
    m["Summary"] = summary
    m["License"] = license
    m["Requires-Python"] = ">=3.10"
    for r in runtime_requirements():
        m["Requires-Dist"] = r
    return m.as_string()


def write_wheel(package: Path, version: str, tag: str, out_dir: Path, license: str, summary: str) -> Path:
    """Pack every file under the folder ``package`` (named as the module) into
    ``out_dir/<name>-<version>-<tag>.whl`` with its .dist-info; an existing wheel of that name is
    replaced atomically."""
    try:
        from wheel.wheelfile import WheelFile
    except ImportError:
        raise PackageError(f"pybridge package needs the 'wheel' package: {install_hint('package')}") from None
    import pybridge

    name = package.name
    if "\n" in license or "\n" in summary:
        raise PackageError("license and summary must be one line each")
    dist = re.sub(r"[-_.]+", "_", name)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{dist}-{version}-{tag}.whl"
    tmp_dir = Path(tempfile.mkdtemp(dir=out_dir, prefix=".wheel-"))
    tmp = tmp_dir / target.name  # WheelFile reads name and version from the file name
    info = f"{dist}-{version}.dist-info"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: pybridge package {pybridge.__version__}\nRoot-Is-Purelib: false\nTag: {tag}\n"
    try:
        with WheelFile(tmp, "w") as wf:
            for path in sorted(p for p in package.rglob("*") if p.is_file()):
                wf.write(str(path), path.relative_to(package.parent).as_posix())
            wf.writestr(f"{info}/METADATA", metadata(name, version, license, summary))
            wf.writestr(f"{info}/WHEEL", wheel_meta)
            wf.writestr(f"{info}/top_level.txt", f"{name}\n")
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return target
