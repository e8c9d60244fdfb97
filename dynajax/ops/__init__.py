"""The op registry (``registry``), the dispatch mode ops ask about recordings (``dispatch``), autocast, and the
op families. Importing this package loads none of them: ``dynajax/__init__`` imports every family, which
registers its ops."""
