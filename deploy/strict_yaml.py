"""YAML as Turnout reads operators' files (gateway config, variant specs, route specs, prices).

PyYAML's ``safe_load`` keeps the last of two equal keys in one mapping, so a variant or a
route written twice in ``gateway.yaml`` silently loses its first definition. Here that is an
error naming both places, as kubectl's strict decoding says "mapping key already defined".
Merge keys (``<<: *anchor``) may still be overridden by the mapping's own keys.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""


def _unique_mapping(loader: _UniqueKeyLoader, node: MappingNode) -> dict[Any, Any]:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: the constructor below says so
            continue
        if first is not None:
            raise ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first given on line {first})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load(text: str, source: str | None = None) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, refusing duplicate keys (``yaml.YAMLError``).

    ``source`` (a file's path) is what error marks name instead of PyYAML's "<unicode string>".
    """
    loader = _UniqueKeyLoader(text)
    if source is not None:
        loader.name = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
