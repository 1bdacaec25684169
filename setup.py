"""Packaging. `make` builds the native artefacts into build/; `pip install .` ships them inside the
package as pybridge/_build so an installed pybridge finds them from any directory."""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# *.fut: the program beside its library, for the size names the manifest leaves out (Library.source).
ARTEFACTS = ("*.so", "*.json", "*.h", "*.fut", "*.cubin", "*.ptx", "*.fatbin")


class build_py_with_artefacts(build_py):
    """Copy what `make` built for users (build/futhark, build/cuda) into the package; build/reference
    holds test programs and is never shipped."""

    def run(self):
        super().run()
        src = HERE / "build"
        dst = Path(self.build_lib) / "pybridge" / "_build"
        if not src.is_dir():
            print("pybridge: no build/ directory; run `make` first to ship compiled libraries")
            return
        for sub in ("futhark", "cuda"):
            for pattern in ARTEFACTS:
                for f in (src / sub).rglob(pattern) if (src / sub).is_dir() else ():
                    if "__pycache__" in f.parts or f.name.endswith((".o",)):
                        continue
                    target = dst / f.relative_to(src)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, target)


setup(
    name="pybridge",
    version="0.1.0",
    description="Call Futhark programs and CUDA C kernels from Python: typed, fast, property-tested",
    long_description=(HERE / "README.md").read_text() if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["pybridge", "pybridge.*"]),
    package_data={"pybridge": ["py.typed"]},
    install_requires=["numpy>=1.23", "cffi>=1.15", "filelock>=3.12", "platformdirs>=3.0"],
    extras_require={
        "cuda": ["pycuda>=2024.1"],
        # futhark-ffi: the baseline that tests/test_futhark_ffi_baseline.py compares against.
        "test": ["pytest>=7", "hypothesis>=6.80", "futhark-ffi>=0.14", "dask[array]>=2024.12", "distributed>=2024.12",
                 "wheel>=0.40", "mypy>=1.10", "auditwheel>=6"],  # tests/test_package.py
        "package": ["wheel>=0.40"],  # pybridge package (writes wheels)
        "dask": ["dask[array]>=2024.12", "distributed>=2024.12"],
        "bench": ["matplotlib>=3.6", "futhark-ffi>=0.14"],
    },
    entry_points={"console_scripts": ["pybridge=pybridge.cli:main"]},
    cmdclass={"build_py": build_py_with_artefacts},
    zip_safe=False,
)
