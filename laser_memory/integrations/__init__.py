"""Integrations with the frameworks agent builders use; each needs its optional extra
(``pip install 'laser-memory[mcp]'``) and the core never imports them."""
