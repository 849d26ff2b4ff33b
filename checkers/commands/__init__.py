"""The record and render commands of `rowgate`, one module each (`row`, `claim`, `render`, `trailers`); the
config writer `init` belongs here too. Each exposes ``add_parser(subparsers, name)``, whose parser's
``func`` runs the command; `checkers.cli.EXTRA_COMMANDS` names them."""
