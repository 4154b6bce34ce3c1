"""Console sign-in: `passwords` (scrypt hashes of local accounts), `access` (the three sign-in
modes, roles, throttling and the local session tokens)."""
