"""Integrations with the frameworks agent builders use; each needs its optional extra
(``pip install 'laser-memory[mcp]'``) and the core never imports them."""


def missing_extra(module: str, extra: str, exc: ImportError) -> ModuleNotFoundError:
    """What an integration raises when imported without its extra: the pip command that
    installs it, the missing module's name kept for callers that look at it."""
    return ModuleNotFoundError(
        f"{module} needs the {extra} extra: pip install 'laser-memory[{extra}]' ({exc})",
        name=exc.name,
    )
