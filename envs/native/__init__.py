"""The native family: Gymnasium's vector API over Cython batch kernels (classic control)."""
