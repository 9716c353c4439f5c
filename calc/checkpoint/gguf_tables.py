"""llama.cpp's own tables, as its gguf-py package (`pip install 'gptcalc[gguf]'`) carries them.

gguf-py mirrors llama.cpp's C tables in pure Python: `constants.py` has the ggml types with their
block sizes (`GGML_QUANT_SIZES`, ggml/src/ggml.c's type_traits), the architecture names and each
architecture's tensors (`MODEL_ARCH_NAMES`, `MODEL_TENSORS`, `TENSOR_NAMES`: src/llama-arch.cpp),
and `tensor_mapping.py` maps Hugging Face tensor names to GGUF ones (`TensorNameMap`, what
convert_hf_to_gguf.py renames with). We use those tables and nothing else of the package.

`import gguf` runs the package's `__init__`, which imports numpy, its reader, writer and quantisers
(numpy is no dependency of gptcalc, and the import alone costs ~100 ms). The two table modules
import nothing but `enum` and `typing`, so they are loaded straight from the installed package's
directory, under a private package name (`_gptcalc_gguf`) that cannot clash with a real `import gguf`.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from functools import cache
from typing import Any

from calc.errors import GptcalcError

__all__ = ["GGUF_HINT", "tables"]

GGUF_HINT = "pip install 'gptcalc[gguf]' (llama.cpp's gguf-py, for its tables of ggml types and tensor names)"
_PACKAGE = "_gptcalc_gguf"


@cache
def tables() -> types.SimpleNamespace:
    """gguf-py's `constants` and `tensor_mapping` modules, loaded without the package's `__init__`."""
    found = importlib.util.find_spec("gguf")
    if found is None or not found.submodule_search_locations:
        raise GptcalcError(f"reading a GGUF file needs the gguf package: {GGUF_HINT}")
    package = types.ModuleType(_PACKAGE)
    package.__path__ = list(found.submodule_search_locations)
    sys.modules[_PACKAGE] = package
    return types.SimpleNamespace(constants=_load("constants"), mapping=_load("tensor_mapping"))


def _load(name: str) -> Any:
    spec = importlib.util.find_spec(f"{_PACKAGE}.{name}")
    if spec is None or spec.loader is None:
        raise GptcalcError(f"the gguf package has no {name}.py; {GGUF_HINT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
