"""`dlrun ui`: a local web app over dlrun's own state store (server.py), its pages (routes.py, views.py,
templates/) and the script and style they ship with (static/: no CDN, charts drawn as SVG by ui.js)."""
