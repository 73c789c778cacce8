"""Build hook for the C kernels (everything else is in pyproject.toml).

`pip install -e .` compiles pyllm/kernels/*.c into pyllm.kernels._native through cffi. If that
fails, pyllm still works on its numpy fallback (slower, same answers).
"""

from setuptools import setup

setup(cffi_modules=["pyllm/kernels/build.py:ffibuilder"])
