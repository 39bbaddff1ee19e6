"""attn-doctor: diagnose the attention stack before training starts.

Pipeline: probe (facts) -> rules (backends, findings) -> verify (kernels) -> report / fix.
"""

__version__ = "0.1.0"
