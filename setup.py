"""Build hook for the C kernels (everything else is in pyproject.toml).

`pip install -e .` compiles pyllm/kernels/*.c into pyllm.kernels._ckernels and harness/fastpath/*.c
into harness.fastpath._fastpath through cffi. If that fails, pyllm still works on its numpy
fallback and the machine on its Python trap path (slower, same answers).
"""

from setuptools import setup

setup(cffi_modules=["pyllm/kernels/build_kernels.py:ffibuilder",
                    "harness/fastpath/build_fastpath.py:ffibuilder"])
