"""Configuration of babylm_jax models exported to Hugging Face (shipped beside config.json).

This file is copied into the export directory and loaded by transformers with
`trust_remote_code=True`; it imports only transformers.
"""
from transformers import PretrainedConfig


class BabyLMConfig(PretrainedConfig):
    """Sizes and switches of a babylm_jax Transformer (causal, mlm or hybrid family).

    `output_layer` picks which entry of `hidden_states` (0 = embeddings, num_hidden_layers =
    final normed output; negative counts from the end) AutoModel returns as `last_hidden_state`.
    The sizes and switches have no default here: an export's config.json carries every one, from
    the run's model config (babylm_jax/config/model.py holds their defaults).
    """

    model_type = "babylm"

    def __init__(
        self,
        vocab_size: int | None = None,
        hidden_size: int | None = None,
        num_hidden_layers: int | None = None,
        num_attention_heads: int | None = None,
        intermediate_size: int | None = None,
        max_position_embeddings: int | None = None,
        family: str | None = None,
        mlp: str | None = None,
        norm: str | None = None,
        norm_eps: float = 1e-6,
        rope_theta: float | None = None,
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
