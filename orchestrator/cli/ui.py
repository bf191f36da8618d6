"""`dlrun ui`: the local web app over dlrun's state store (orchestrator/ui/), imported only when it runs."""
from __future__ import annotations

import click


@click.command("ui")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="port on 127.0.0.1 (default 8470, or a free one when it is taken; 0: any free one)")
@click.option("--open", "open_browser", is_flag=True, help="open the page in the browser")
def ui_command(port, open_browser):
    """Web pages of every job, its plan, curves and logs, schedules and cost (127.0.0.1, with a token)."""
    from orchestrator.state.db import default_store
    from orchestrator.ui.server import serve

    serve(default_store(), port, open_browser=open_browser, say=lambda line: click.echo(line, err=True))
