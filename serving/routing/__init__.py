"""Pure routing policy: route specs and a request key in, a :class:`Decision` out. No I/O."""
