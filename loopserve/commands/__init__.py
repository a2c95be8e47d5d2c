"""One module per subcommand; each registers itself with ``add_parser(subparsers)``."""
