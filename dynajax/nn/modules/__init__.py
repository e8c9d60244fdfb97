"""Layer modules of ``dynajax.nn``."""
