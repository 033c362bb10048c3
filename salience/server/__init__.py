from salience.server.app import Limits, create_app, serve

__all__ = ["Limits", "create_app", "serve"]
