"""Development tools of the platform, not part of the product: the AWS emulator (:mod:`devtools.local_aws`,
``trainctl local-aws``) and the demo (:mod:`devtools.demo`, ``make demo``).

Installed with the project; the emulator needs moto, the project's extra ``local``. Product modules never
import this package (import-linter, ``tests/test_layers.py``): ``trainctl local-aws`` reaches trainctl as a
command of the entry-point group ``trainctl.commands`` (pyproject.toml).
"""
