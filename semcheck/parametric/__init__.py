"""Safe for every device count: a proof for all N of a uniform collective kernel, or the
smallest N at which it fails (docs/parametric.md).

`template` fits one program in the device index d, the loop's round k and the device count
N to the protocols a kernel gave at a few counts; `counting` and `ordering` prove its
properties for every N from some N0 on with z3 (`prove` runs both); `family` (the entry
layer) loads the kernel at the counts it needs, checks the counts below N0 one by one with
the explicit search, and says the verdict.
"""
