"""BERT: a bidirectional Transformer encoder pre-trained by masked-LM and next-sentence prediction.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding". The input representation (Figure 2) is the sum of token, position and segment
embeddings, followed by LayerNorm and dropout; the encoder is the original post-norm Transformer
encoder with GELU (``x = LN(x + attn(x))``, ``x = LN(x + FFN(x))``). On top:

- the pooler: ``tanh(W h_[CLS])``, the sentence summary used by NSP and classification;
- the masked-LM head: ``dense -> GELU -> LayerNorm -> logits`` with the output matrix tied to the
  token embedding (the masking itself lives in :mod:`course_lib.masking`);
- the next-sentence head (2 classes) and a sequence-classification head for fine-tuning.

``BertConfig.num_languages > 0`` adds XLM's language embeddings (Lample & Conneau 2019) to the
input, used by translation-language-modelling batches (:mod:`course_lib.xlm`).

Attention and MLP come from ``course_lib.attention`` / ``course_lib.layers``; ``from_hf_bert``
renames Hugging Face keys onto them (``attention.self.query`` -> ``attention.q_proj``, ...).

Shapes: ``B`` batch, ``T`` tokens, ``C`` channels (``hidden_size``), ``H`` heads, ``V`` vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from course_lib.attention import MultiHeadAttention
from course_lib.layers import FeedForward, LayerNorm
from course_lib.models._family import alias, preset

_ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


@dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of BERT (field names as in Hugging Face's ``BertConfig``)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segments A and B
    num_languages: int = 0  # > 0 adds XLM language embeddings
    num_labels: int = 2  # classes of the sequence-classification head
    hidden_act: Literal["gelu", "gelu_tanh", "relu"] = "gelu"
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    fused_attn: bool = True

    # The contract's names (course_lib.models._family); the fields keep Hugging Face's names.
    embed_dim = alias("hidden_size")
    depth = alias("num_hidden_layers")
    num_heads = alias("num_attention_heads")
    norm_eps = alias("layer_norm_eps")

    @property
    def mlp_ratio(self) -> float:
        """intermediate_size / hidden_size."""
        return self.intermediate_size / self.hidden_size

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size={self.hidden_size} must be divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {sorted(_ACTIVATIONS)}")


class BertOutput(NamedTuple):
    """What :class:`BertModel` returns."""

    hidden: Tensor  # (B, T, C) last layer
    pooled: Tensor | None  # (B, C) tanh(W h_[CLS]), None without a pooler
    attentions: list[Tensor] | None  # per layer (B, H, T, T) when return_attn=True


class BertEmbeddings(nn.Module):
    """Token + position + segment (+ language) embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        C = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, C)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, C)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, C)
        self.language_embeddings = (
            nn.Embedding(config.num_languages, C) if config.num_languages > 0 else None
        )
        self.norm = LayerNorm(C, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        language_ids: Tensor | None = None,
    ) -> Tensor:
        """Ids (B, T) each -> embeddings (B, T, C). Defaults: segment 0, positions 0..T-1."""
        B, T = input_ids.shape
        if T > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence of {T} tokens exceeds max_position_embeddings="
                f"{self.position_embeddings.num_embeddings}"
            )
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, T, C)
        if language_ids is not None:
            if self.language_embeddings is None:
                raise ValueError("language_ids given but the config has num_languages=0")
            x = x + self.language_embeddings(language_ids)
        return self.dropout(self.norm(x))


class BertLayer(nn.Module):
    """Post-norm encoder layer: ``x = LN(x + attn(x))``, then ``x = LN(x + FFN(x))``."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        C = config.hidden_size
        self.attention = MultiHeadAttention(
            C, config.num_attention_heads, dropout=config.dropout, fused=config.fused_attn
        )
        self.attention_norm = LayerNorm(C, eps=config.layer_norm_eps)
        self.mlp = FeedForward(
            C, config.intermediate_size, dropout=config.dropout, activation=config.hidden_act
        )
        self.mlp_norm = LayerNorm(C, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, return_attn: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, C), keep-mask broadcastable to (B, H, T, T) -> (x (B, T, C), weights).

        ``weights`` are the attention weights (B, H, T, T) when ``return_attn``, else None.
        """
        if return_attn:
            a, weights = self.attention(x, mask=mask, return_weights=True)
        else:
            a, weights = self.attention(x, mask=mask), None
        x = self.attention_norm(x + self.dropout(a))
        x = self.mlp_norm(x + self.mlp(x))
        return x, weights


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): (B, T, C) -> (B, C)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class BertModel(nn.Module):
    """The BERT encoder: ids (B, T) -> :class:`BertOutput` (hidden (B, T, C), pooled (B, C))."""

    def __init__(self, *, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(_init_weights)

    def forward(
        self,
        input_ids: Tensor,
        *,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        language_ids: Tensor | None = None,
        return_attn: bool = False,
    ) -> BertOutput:
        """``attention_mask`` (B, T) is True (or 1) for real tokens and False (0) for padding."""
        x = self.embeddings(input_ids, token_type_ids, position_ids, language_ids)  # (B, T, C)
        mask = None
        if attention_mask is not None:
            mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): keys each query may see
        attentions = [] if return_attn else None
        for layer in self.layers:
            x, weights = layer(x, mask, return_attn=return_attn)
            if attentions is not None:
                attentions.append(weights)
        pooled = self.pooler(x) if self.pooler is not None else None
        return BertOutput(x, pooled, attentions)


class BertMLMHead(nn.Module):
    """Masked-LM head: dense -> activation -> LayerNorm -> logits over the tied token embedding."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = _ACTIVATIONS[config.hidden_act]
        self.norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.decoder.weight = word_embeddings.weight  # tied: one matrix embeds and un-embeds

    def forward(self, hidden: Tensor) -> Tensor:
        """hidden (B, T, C) -> logits (B, T, V)."""
        return self.decoder(self.norm(self.act(self.dense(hidden))))


class BertForPreTraining(nn.Module):
    """BERT with both pre-training heads: ids (B, T) -> (MLM logits (B, T, V), NSP logits (B, 2)).

    Its ``bert`` is the encoder to fine-tune later: copy ``bert.state_dict()`` into a classifier.
    """

    def __init__(self, *, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config=config)
        self.mlm = BertMLMHead(config, self.bert.embeddings.word_embeddings)
        self.nsp = nn.Linear(config.hidden_size, 2)  # is-next / not-next
        _init_heads(self)

    def forward(self, input_ids: Tensor, **kwargs) -> tuple[Tensor, Tensor]:
        """Keyword arguments as in :meth:`BertModel.forward`."""
        out = self.bert(input_ids, **kwargs)
        return self.mlm(out.hidden), self.nsp(out.pooled)


class BertForMaskedLM(nn.Module):
    """BERT (no pooler) with the masked-LM head: ids (B, T) -> logits (B, T, V)."""

    def __init__(self, *, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config=config, add_pooling_layer=False)
        self.mlm = BertMLMHead(config, self.bert.embeddings.word_embeddings)
        _init_heads(self)

    def forward(self, input_ids: Tensor, **kwargs) -> Tensor:
        return self.mlm(self.bert(input_ids, **kwargs).hidden)


class BertForSequenceClassification(nn.Module):
    """BERT + dropout + linear on the pooled [CLS]: ids (B, T) -> logits (B, num_labels)."""

    def __init__(self, *, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config=config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        _init_heads(self)

    def forward(self, input_ids: Tensor, **kwargs) -> Tensor:
        return self.classifier(self.dropout(self.bert(input_ids, **kwargs).pooled))


def _init_weights(module: nn.Module) -> None:
    """BERT's initialisation: N(0, 0.02) weights, zero biases (LayerNorm keeps 1 and 0)."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def _init_heads(model: nn.Module) -> None:
    for name, child in model.named_children():
        if name != "bert":
            child.apply(_init_weights)  # in place, so the tied decoder stays tied


# Hugging Face key (without the "bert." prefix) -> course_lib key.
_HF_RENAMES = [
    (r"^embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.query\.", r"layers.\1.attention.q_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.key\.", r"layers.\1.attention.k_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.value\.", r"layers.\1.attention.v_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out_proj."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.mlp.fc1."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.mlp.fc2."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.mlp_norm."),
    (r"^cls\.predictions\.transform\.dense\.", "mlm.dense."),
    (r"^cls\.predictions\.transform\.LayerNorm\.", "mlm.norm."),
    (r"^cls\.predictions\.decoder\.", "mlm.decoder."),
    (r"^cls\.predictions\.bias$", "mlm.decoder.bias"),
    (r"^cls\.seq_relationship\.", "nsp."),
]


def _rename_hf_key(key: str) -> str:
    prefix = "bert." if key.startswith("bert.") else ""
    key = key.removeprefix(prefix)
    for pattern, target in _HF_RENAMES:
        if re.match(pattern, key):
            return ("" if key.startswith("cls.") else prefix) + re.sub(pattern, target, key)
    return prefix + key


def from_hf_bert(hf_model: nn.Module) -> nn.Module:
    """Convert a Hugging Face ``BertModel``, ``BertForPreTraining`` or ``BertForMaskedLM``."""
    c = hf_model.config
    if getattr(c, "position_embedding_type", "absolute") != "absolute" or c.is_decoder:
        raise ValueError("only encoder-only BERT with absolute position embeddings is supported")
    if c.hidden_act not in ("gelu", "gelu_new", "relu"):
        raise ValueError(
            f"unsupported hidden_act {c.hidden_act!r}; expected gelu, gelu_new or relu"
        )
    config = BertConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        intermediate_size=c.intermediate_size,
        max_position_embeddings=c.max_position_embeddings,
        type_vocab_size=c.type_vocab_size,
        hidden_act={"gelu_new": "gelu_tanh"}.get(c.hidden_act, c.hidden_act),
        dropout=c.hidden_dropout_prob,
        layer_norm_eps=c.layer_norm_eps,
    )
    kind = type(hf_model).__name__
    if kind == "BertModel":
        model: nn.Module = BertModel(config=config, add_pooling_layer=hf_model.pooler is not None)
    elif kind == "BertForPreTraining":
        model = BertForPreTraining(config=config)
    elif kind == "BertForMaskedLM":
        model = BertForMaskedLM(config=config)
    else:
        raise TypeError(f"from_hf_bert cannot convert a {kind}")
    ours = model.state_dict()
    for hf_key, value in hf_model.state_dict().items():
        key = _rename_hf_key(hf_key)
        if key.endswith(("position_ids", "token_type_ids")):
            continue  # buffers, not weights
        if key not in ours:
            raise KeyError(f"Hugging Face weight {hf_key!r} has no place ({key!r}) in {kind}")
        ours[key] = value
    model.load_state_dict(ours)
    return model.to(dtype=next(hf_model.parameters()).dtype).train(hf_model.training)


#: course_lib.interop.from_hf dispatches on these Hugging Face class names.
HF_CONVERTERS = {
    "BertModel": from_hf_bert,
    "BertForPreTraining": from_hf_bert,
    "BertForMaskedLM": from_hf_bert,
}

_TINY = BertConfig(
    vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=64, dropout=0.0,
)  # fmt: skip
_LARGE = BertConfig(
    hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
)

PRESETS: dict[str, Callable[..., nn.Module]] = {
    "bert-tiny": preset(BertModel, _TINY),
    "bert-tiny-pretraining": preset(BertForPreTraining, _TINY),
    "bert-tiny-mlm": preset(BertForMaskedLM, _TINY),
    "bert-tiny-classifier": preset(BertForSequenceClassification, _TINY),
    "bert-base": preset(BertModel, BertConfig()),  # 110M (Devlin et al. 2019, Section 3)
    "bert-large": preset(BertModel, _LARGE),  # 335M, reported as 340M
    "bert-base-pretraining": preset(BertForPreTraining, BertConfig()),
}

#: Overrides that make every preset tiny (tests/test_models_generic.py).
TINY = dict(
    vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=32, max_position_embeddings=32, num_languages=2,
)  # fmt: skip


def example_batch(
    model: nn.Module, *, batch_size: int = 2
) -> tuple[dict[str, Tensor], tuple[int, ...]]:
    """Deterministic inputs (two segments, two languages, padding) and the main output's shape."""
    config: BertConfig = model.config
    T = min(8, config.max_position_embeddings)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(config.vocab_size, (batch_size, T), generator=generator)
    attention_mask = torch.ones(batch_size, T, dtype=torch.bool)
    attention_mask[0, T // 2 + 1 :] = False  # padding at the end of the first sequence
    segments = (torch.arange(T) >= T // 2).long().expand(batch_size, T)  # (B, T): A then B
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": segments}
    if config.num_languages > 0:
        inputs["language_ids"] = segments % config.num_languages
    shapes = {
        BertModel: (batch_size, T, config.hidden_size),
        BertForPreTraining: (batch_size, T, config.vocab_size),
        BertForMaskedLM: (batch_size, T, config.vocab_size),
        BertForSequenceClassification: (batch_size, config.num_labels),
    }
    return inputs, shapes[type(model)]
