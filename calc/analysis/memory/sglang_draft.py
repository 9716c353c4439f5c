"""SGLang's EAGLE / MTP draft worker in its KV budget (--speculative-algorithm EAGLE, EAGLE3 or NEXTN, turned on in
gptcalc by --speculative-num-steps), for the models its DefaultPoolConfigurator sizes (MHA, GQA, MLA and DSA caches
without sliding windows or Mamba states).

The draft worker keeps its own KV pool of as many tokens as the target's (draft_runner_cache_size: the target's
max_total_num_tokens), over its own layers. SGLang makes room for it by pricing the target's token higher
(sgl-project/sglang at 29b719ba3a72, model_runner_components/pool_configurator.py, DefaultPoolConfigurator.__init__):

    cell = int(cell x (1 + eagle_draft_num_layers / num_layers))          num_layers: the target's on this GPU

in floats, as written there, assuming each draft layer costs what a target layer does. eagle_draft_num_layers is
the draft config's num_nextn_predict_layers, else max(num_hidden_layers, num_attention_layers)
(ModelRunner.__init__ in model_executor/model_runner.py at the same commit). It is read only where a draft model
path is set: SGLang sets it to the model's own for its MTP architectures (DeepSeek-V3 / V3.2 / V4, GLM-4.5 /
4.5-Air / 5, Bailing, Mistral-Large-3, HY-V3: _handle_eagle_family in arg_groups/speculative_hook.py at
004c82e07d87); elsewhere (Qwen3-Next's, MiMo's MTP) the user gives --speculative-draft-model-path, without which
SGLang prices no draft at all. gptcalc assumes the path is set.

With speculative decoding SGLang runs at most 48 requests unless --max-running-requests says otherwise
(_handle_eagle_family), and the pool config keeps them under half its tokens (_resolve_max_num_reqs in
model_runner_kv_cache_mixin.py at 29b719ba3a72: min(48 // dp_size, tokens // 2)).

--speculative-eagle-topk and --speculative-num-draft-tokens do not enter this pool (they size the Mamba pool's
intermediate states and the sliding-window cap, which are not modelled here), so gptcalc takes no flag for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from calc.analysis.memory.kv import KVCache
from calc.errors import GptcalcError

__all__ = ["SOURCE", "SPECULATIVE_MAX_RUNNING", "DraftShare", "draft_share"]

SOURCE = ("https://github.com/sgl-project/sglang/blob/29b719ba3a729295c7b5afcc80b4cf0adf5b45fb/python/sglang/srt/"
          "model_executor/model_runner_components/pool_configurator.py (DefaultPoolConfigurator.__init__: cell x "
          "(1 + eagle_draft_num_layers / num_layers))")
SPECULATIVE_MAX_RUNNING = 48  # _handle_eagle_family: max_running_requests when --max-running-requests is not given


@dataclass(frozen=True)
class DraftShare:
    """The target's cell on one GPU, and what SGLang's draft worker adds to it."""

    cell: int  # the target's bytes a token over its layers on this GPU
    layers: int  # the target's layers on this GPU (num_effective_layers)
    draft_layers: int  # eagle_draft_num_layers

    @property
    def priced(self) -> int:
        """The cell the pool is divided by: int(cell x (1 + D / L)) in SGLang's floats."""
        return int(self.cell * (1 + self.draft_layers / self.layers))

    @property
    def draft_cell(self) -> int:
        """One token of the draft worker's own pool, each draft layer a target layer's bytes."""
        return self.cell * self.draft_layers // self.layers

    def to_json(self) -> dict[str, object]:
        return {"target_cell_bytes": self.cell, "target_layers": self.layers, "draft_layers": self.draft_layers,
                "priced_cell_bytes": self.priced, "draft_cell_bytes": self.draft_cell, "source": SOURCE}


def draft_share(kv: KVCache, cell: int, draft_layers: int | None, pp: int = 1) -> DraftShare:
    """SGLang's draft share for this cache; `draft_layers`: the draft's layers (None: the model's MTP layers)."""
    if pp > 1:
        raise GptcalcError(f"--pp {pp} with a draft model: SGLang refuses MTP drafts under pipeline parallelism "
                           "(\"PP is not compatible with MTP models\", model_runner.py) and places an EAGLE draft on "
                           "the last stage, which is not modelled")
    if kv.states:
        raise GptcalcError(f"--speculative-num-steps with --engine sglang: {kv.model} keeps Mamba states, whose pool "
                           "SGLang shrinks for the draft's intermediate states (handle_max_mamba_cache); not modelled")
    if any(kind.window for kind in kv.layers):
        raise GptcalcError(f"--speculative-num-steps with --engine sglang: {kv.model} has sliding-window layers, which "
                           "SGLang's HybridSWAPoolConfigurator sizes without the draft's share; not modelled")
    mtp = sum({kind.block: kind.n_layers for kind in kv.mtp}.values())
    layers = draft_layers if draft_layers is not None else mtp
    if layers <= 0:
        raise GptcalcError(f"--speculative-num-steps: {kv.model} has no MTP layers; give the EAGLE draft's layer count "
                           "with --speculative-draft-layers (its config's num_hidden_layers)")
    return DraftShare(cell, kv.n_layers, layers)
