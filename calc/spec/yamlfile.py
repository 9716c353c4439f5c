"""Reading YAML safely and strictly: plain scalars, lists and mappings only, errors naming file and line.

Safe: PyYAML's safe loader never constructs Python objects. Strict, as every input
(`calc.inputs`): a mapping key given twice is an error (`d_model: 64` then `d_model: 128` is
not silently 128), an integer of more than `MAX_INT_DIGITS` digits is refused, and a value the
constructor cannot build (`!!int abc`, a date that does not exist) is an error line, as is data
nested too deeply or expanded by aliases past `MAX_VALUES`.
"""

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from calc.errors import GptcalcError
from calc.inputs import check_nesting, read_text, strict_int

__all__ = ["load_yaml", "read_yaml"]

# libyaml's safe loader when PyYAML was built with it (several times faster), else the pure one.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


class _StrictLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """The safe loader, refusing repeated keys and absurdly long integers."""

    origin = "YAML"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:  # `<<: *base` then a key of its own is an override, on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float)):
                continue  # an unhashable key is the base constructor's error to report
            if key in seen:
                raise ConstructorError(None, None, f"key {key!r} is given twice (which one is meant?)",
                                       key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        strict_int(str(node.value).replace("_", ""), self.origin)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file (at most `MAX_TEXT_BYTES`); errors name the file and line."""
    return load_yaml(read_text(path), str(path))


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
