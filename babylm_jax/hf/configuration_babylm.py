"""Configuration of babylm_jax models exported to Hugging Face (shipped beside config.json).

This file is copied into the export directory and loaded by transformers with
`trust_remote_code=True`; it imports only transformers.
"""
from transformers import PretrainedConfig


class BabyLMConfig(PretrainedConfig):
    """Sizes and switches of a babylm_jax Transformer (causal, mlm or hybrid family).

    `output_layer` picks which entry of `hidden_states` (0 = embeddings, num_hidden_layers =
    final normed output; negative counts from the end) AutoModel returns as `last_hidden_state`.
    """

    model_type = "babylm"

    def __init__(
        self,
        vocab_size: int = 6000,
        hidden_size: int = 128,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        intermediate_size: int = 384,
        max_position_embeddings: int = 512,
        family: str = "causal",
        mlp: str = "swiglu",
        norm: str = "rmsnorm",
        norm_eps: float = 1e-6,
        rope_theta: float = 10000.0,
        output_layer: int = -1,
        initializer_range: float = 0.02,
        pad_token_id: int = 0,
        bos_token_id: int = 2,
        eos_token_id: int = 3,
        tie_word_embeddings: bool = True,
        **kwargs,
    ):
        settings = dict(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                        num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
                        max_position_embeddings=max_position_embeddings, family=family, mlp=mlp, norm=norm,
                        norm_eps=norm_eps, rope_theta=rope_theta, output_layer=output_layer,
                        initializer_range=initializer_range)
        for name, value in settings.items():
            setattr(self, name, value)
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         tie_word_embeddings=tie_word_embeddings, **kwargs)
