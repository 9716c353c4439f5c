"""The torch reference's modules, one home per part kind (attention, MLA, MLP, MoE, norms, rotary),
and `base`: the weight holders and how they are placed at their Hugging Face paths."""
