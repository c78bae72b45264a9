"""Protocol IR -> Protocol IR: input ranges (`assumptions.py`), repeated invocations
(`invocations.py`), kernels run one after another as one protocol (`programs.py`), and the
reading of a chip's cores entering a kernel (`core_entry.py`). Each is applied between a
frontend and the semantics; none imports either."""
