"""Business rules and their transactions, one module per noun; nothing here imports Flask."""
