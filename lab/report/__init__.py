"""Reports over the ledger: tables built from records that carry their provenance (`python -m lab report NAME`)."""
