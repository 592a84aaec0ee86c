"""The CARE vocabulary (no torch import: the experiment plan reads it): factorization methods,
rank allocations and healing methods, named once."""

FACTORIZATIONS = ("svd", "asvd", "care")  # kvspec.care.factorize
ALLOCATIONS = ("uniform", "waterfill")  # kvspec.care.allocate
# healing starts from the plain SVD MLA model or from a restored one (kvspec.care.restore)
RESTORE_METHODS = {"transmla": "svd", "transmla-pca": "pca", "transmla-care": "care"}
HEAL_METHODS = ("svd", *RESTORE_METHODS)
