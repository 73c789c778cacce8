"""The one backend layer both models build their weights through (models never look at a
weight format; they ask an `Ops` for matrices and kernels and call what they get).

    ops.py           the Ops protocol, the three Ops (numpy-f32, numpy-q8, c) and make_ops()
    linear.py        the matrix objects ("Linear": y = lin(x)), one class per weight format
    traits.py        the one table: weight format name -> its Linear class and what runs it
    tensors.py       stored tensors (any type) as float32 rows; the embedding lookup
    reference.py     the numpy reference math of the DeltaNet kernels (the C twins' reference)
    repack_cache.py  repacked records kept on disk, mapped on the next load
    threads.py       who owns the cores: the C pool's default size, numpy's BLAS threads

Below it are the C kernels and their numpy twins (pyllm/kernels/), above it the models.
"""
