"""The broker's settings: their names, defaults and checks, and the ones changed at run time. Imports nothing else
of the broker.

- ``config.py``: :class:`~.config.BrokerConfig` and the table of every setting (the settings reference is made
  from it); ``values.py``, ``listeners.py``, ``security.py``: the value types and checks, the listeners, the
  security settings; ``security_checks.py``: the checks across security settings at start;
- ``dynamic.py``: dynamic broker configs (KIP-226); ``group_configs.py``: a consumer group's own configs.
"""
