"""The one thing pyproject.toml cannot say yet (its `ext-modules` table is experimental): the optional C extensions.
`tracec.runtime._gather` reads the fact builder's fields; `tracec.runtime._fixed` is the fixed reward kernels, built
without fused multiply-add (and, as always, without -ffast-math) so that they round as their Numba definitions do.
Without a compiler the build goes on: the fact builder keeps its Python path and the kernels their Numba one."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("tracec.runtime._gather", ["runtime/_gather.c", "runtime/_gather_sets.c"], optional=True,
              depends=["runtime/_gather.h"], extra_compile_args=["-O2"]),
    Extension("tracec.runtime._fixed", ["runtime/_fixed.c", "runtime/_fixed_groups.c"], optional=True,
              depends=["runtime/_fixed.h"], extra_compile_args=["-O3", "-ffp-contract=off"]),
])
