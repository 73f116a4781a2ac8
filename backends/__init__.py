"""Backend adapters: one module per protocol family behind ``backends.base.Backend``."""
