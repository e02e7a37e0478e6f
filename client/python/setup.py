"""Builds the extension pmc._pmc for pip (pyproject.toml) with libpmcclient compiled in.

The library's sources are the ones client/lib/CMakeLists.txt lists (PMC_CLIENT_SOURCES, read
from there: one list), taken from the source tree this directory is part of; the wire's
generated code (pmc.pb-c.[ch]) is made from proto/pmc.proto with protoc-c at build time, as
the CMake build makes it, rather than kept in the tree beside the file it derives from. The
version is the CMake project's. The extension links libprotobuf-c.
"""
import os
import re
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def version():
    m = re.search(r"project\(pmc VERSION ([0-9.]+)", read("CMakeLists.txt"))
    if not m:
        raise RuntimeError("no project(pmc VERSION ...) in " + os.path.join(ROOT, "CMakeLists.txt"))
    return m.group(1)


def library_sources(gen):
    """client/lib's sources as its CMakeLists.txt lists them, as paths."""
    m = re.search(r"set\(PMC_CLIENT_SOURCES([^)]*)\)", read("client", "lib", "CMakeLists.txt"))
    if not m:
        raise RuntimeError("no PMC_CLIENT_SOURCES in client/lib/CMakeLists.txt")
    out = []
    for s in m.group(1).split():
        s = s.replace("${PROJECT_SOURCE_DIR}", ROOT).replace("${PMC_GEN}", gen)
        out.append(s if os.path.isabs(s) else os.path.join(ROOT, "client", "lib", s))
    return out


class BuildExt(build_ext):
    """Makes pmc.pb-c.[ch] with protoc-c, then builds the extension with the library's
    sources (absolute paths: their objects go under build_temp, none in the source tree)."""

    def build_extensions(self):
        gen = os.path.join(os.path.abspath(self.build_temp), "gen")
        os.makedirs(gen, exist_ok=True)
        protoc = shutil.which("protoc-c")
        if not protoc:
            raise RuntimeError("protoc-c is needed to build pmc (Debian: protobuf-c-compiler)")
        subprocess.check_call([protoc, "--c_out=" + gen,
                               "--proto_path=" + os.path.join(ROOT, "proto"), "pmc.proto"])
        for ext in self.extensions:
            ext.sources += library_sources(gen)
            ext.include_dirs += [gen]
        super().build_extensions()


setup(
    version=version(),
    ext_modules=[Extension(
        "pmc._pmc",
        sources=["pmcmodule.c"],
        include_dirs=[os.path.join(ROOT, d) for d in ("client/include", "client", "proto")],
        define_macros=[("_GNU_SOURCE", "1"), ("PMC_VERSION", '"%s"' % version())],
        # As CMake builds the library: C11 with GNU extensions, only pmc_* exported, its
        # functions bound at load (not lazily inside a first region).
        extra_compile_args=["-std=gnu11", "-fvisibility=hidden", "-pthread"],
        extra_link_args=["-pthread", "-Wl,-z,now"],
        libraries=["protobuf-c"],
    )],
    cmdclass={"build_ext": BuildExt},
)
