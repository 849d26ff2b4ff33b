"""Records kept as markdown tables: the table reader, and the mapping of table lines onto record fields."""
