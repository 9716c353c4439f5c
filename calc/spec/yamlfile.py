"""Reading YAML safely and strictly: plain scalars, lists and mappings only, errors naming file and line.

Safe: PyYAML's safe loader never constructs Python objects. Strict, as every input
(`calc.inputs`): a mapping key given twice is an error (`d_model: 64` then `d_model: 128` is
not silently 128), and so is one given by two merged mappings or a merge key `<<` given twice
(a key of the mapping's own after `<<: *base` overrides it, as YAML means it to), an integer of more than `MAX_INT_DIGITS` digits is refused, and a value the
constructor cannot build (`!!int abc`, a date that does not exist) is an error line, as is data
nested too deeply or expanded by aliases past `MAX_VALUES`.
"""

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from calc.errors import GptcalcError
from calc.inputs import MAX_SPEC_BYTES, check_nesting, read_text, strict_int

__all__ = ["load_yaml", "read_yaml"]

# libyaml's safe loader when PyYAML was built with it (several times faster), else the pure one.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"


class _StrictLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """The safe loader, refusing repeated keys and absurdly long integers."""

    origin = "YAML"

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Check a mapping, then resolve its merges (`<<: *base`, `<<: [*a, *b]`): the merged keys,
        then its own, which win. Every mapping passes here before it is built (and a merged one before
        it is merged). PyYAML keeps the first pair of a key instead, so an override inside a merged
        mapping was lost (`d: {<<: *a, x: 5}` merged into `b` gave `b` the `x` of `a`)."""
        for key_node, _ in node.value:
            if key_node.tag == _VALUE:  # a plain `=` key is the string "=", as PyYAML reads it
                key_node.tag = "tag:yaml.org,2002:str"
        self._check(node)
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                for source in _sources(value_node):
                    if not isinstance(source, yaml.MappingNode):
                        raise ConstructorError("while constructing a mapping", node.start_mark, "expected a mapping "
                                               f"or list of mappings for merging, but found {source.id}", source.start_mark)
                    self.flatten_mapping(source)
                    merged += source.value
        if merged:
            pairs = merged + [(key, value) for key, value in node.value if key.tag != _MERGE]
            node.value = list({self._key(key): (key, value) for key, value in pairs}.values())

    def _check(self, node: yaml.MappingNode) -> None:
        """A key given twice is an error, and so is `<<` given twice, or a key that two merged mappings
        both give (YAML's "first one wins"); a key of the mapping's own after `<<` overrides, on purpose."""
        seen: set[Any] = set()
        merges = [(key_node, value) for key_node, value in node.value if key_node.tag == _MERGE]
        if len(merges) > 1:
            raise ConstructorError(None, None, "the merge key '<<' is given twice (merge several mappings "
                                   "as `<<: [*a, *b]`)", merges[1][0].start_mark)
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self._key(key_node)
            if key in seen:
                raise ConstructorError(None, None, f"key {key!r} is given twice (which one is meant?)",
                                       key_node.start_mark)
            seen.add(key)
        merged: set[Any] = set()
        for source in _sources(merges[0][1]) if merges else ():
            keys = self._keys(source)
            if merged & keys:
                raise ConstructorError(None, None, f"key {sorted(merged & keys, key=str)[0]!r} is given twice "
                                       "(by two merged mappings: which one is meant?)", source.start_mark)
            merged |= keys

    def _keys(self, node: yaml.Node) -> set[Any]:
        """The keys a merged mapping brings, its own merges' included (not a mapping: an error later)."""
        if not isinstance(node, yaml.MappingNode):
            return set()
        keys: set[Any] = set()
        for key_node, value in node.value:
            if key_node.tag != _MERGE:
                keys.add(self._key(key_node))
            else:
                for source in _sources(value):
                    keys |= self._keys(source)
        return keys

    def _key(self, key_node: yaml.Node) -> Any:
        """A key as built; an unhashable one as its node (the base constructor reports it)."""
        key = self.construct_object(key_node, deep=True)
        return key if isinstance(key, (str, int, float)) else key_node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        strict_int(str(node.value).replace("_", ""), self.origin)
        return super().construct_yaml_int(node)


def _sources(value: yaml.Node) -> list[yaml.Node]:
    """The mappings a merge key names: one, or a sequence of them."""
    return list(value.value) if isinstance(value, yaml.SequenceNode) else [value]


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def read_yaml(path: Path, limit: int = MAX_SPEC_BYTES) -> Any:
    """Parse a YAML file of at most `limit` bytes (checked before parsing: see `MAX_SPEC_BYTES`);
    errors name the file and line."""
    return load_yaml(read_text(path, limit), str(path))


def load_yaml(text: str, origin: str) -> Any:
    """Parse YAML text (a file's, or a `--set` value's) safely and strictly."""
    loader = _StrictLoader(text)
    loader.origin = origin
    try:
        value = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise GptcalcError(f"{origin}: {where}invalid YAML: {problem}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a scalar its tag cannot build: `!!int abc`, 2024-02-30
        raise GptcalcError(f"{origin}: invalid YAML value: {exc}") from None
    except RecursionError:
        raise GptcalcError(f"{origin}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    check_nesting(value, origin)
    return value
