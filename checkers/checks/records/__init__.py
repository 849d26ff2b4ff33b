"""The record checks (agent-record, live-rows, doc-checkpoint, role-discipline), one module each, and the
helpers they share: the per-state requirements of a row (rowreqs, also used by `rowgate row`) and the
issue references of a message (issuerefs)."""
