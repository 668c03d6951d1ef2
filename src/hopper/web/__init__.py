"""``hopper web``: the dashboard, a small ASGI app over the same files as the CLI.

Optional: it needs the ``web`` extra (Starlette and uvicorn: ``./install.sh --web``,
or ``pip install -e '.[web]'`` in the checkout; PyPI's ``hopper`` is another project).
Nothing outside this package imports it, so the core stays lean.

Rooms: ``token.py`` (the web-token file), ``gate.py`` (who may ask what:
token, cookie, CSRF), ``catalog.py`` (the status index, on one thread),
``feeds.py`` (one tail per followed file), ``hub.py`` (inotify -> feeds and
job changes, fanned out to every client), ``sse.py`` (the wire format),
``api.py`` (the JSON API), ``actions.py`` (writes, only through the contract),
``app.py`` (routes, static files), ``server.py`` (uvicorn).
"""
