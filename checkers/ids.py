"""Identifier patterns shared by the records and the trailer contract; a module with no imports, so the
contract can use them without loading the records' pydantic models."""

ROW_ID = r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)+$"
SHA = r"^[0-9a-f]{40}$"
