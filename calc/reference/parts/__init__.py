"""The torch reference's modules, one home per part kind (attention, MLA, Mamba2, gated DeltaNet,
KDA, lightning attention, short conv, MLP, MoE, norms, rotary); `stateful`: what the mixers without
attention share (their causal conv and cached states); `block`: a layer, its mixer picked by kind;
and `base`: the weight holders and how they are placed at their Hugging Face paths."""
