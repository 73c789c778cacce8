"""Build hook for the C kernels (everything else is in pyproject.toml).

`pip install -e .` compiles pyllm/kernels/*.c into pyllm.kernels._native and harness/native/*.c
into harness.native._fastpath through cffi. If that fails, pyllm still works on its numpy
fallback and the machine on its Python trap path (slower, same answers).
"""

from setuptools import setup

setup(cffi_modules=["pyllm/kernels/build.py:ffibuilder",
                    "harness/native/build.py:ffibuilder"])
