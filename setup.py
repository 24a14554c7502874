"""The one thing pyproject.toml cannot say yet (its `ext-modules` table is experimental): the optional C extension
`tracec.runtime._gather`. Without a compiler the build goes on and the fact builder keeps its Python path."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tracec.runtime._gather", ["runtime/_gather.c", "runtime/_gather_sets.c"], optional=True,
                             depends=["runtime/_gather.h"], extra_compile_args=["-O2"])])
