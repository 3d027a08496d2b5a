"""Network specs: the manifest's ``network`` section.

RL algorithms take a :class:`NetworkSpec` (an encoder plus an MLP head); LLM
algorithms take a :class:`FinetuningNetworkSpec` (a pretrained model id, a
context length and an optional LoRA adapter).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from agilerl.arena.models.base import StrictModel

MlpActivation = Literal[
    "Tanh",
    "GELU",
    "ReLU",
    "ELU",
    "LeakyReLU",
    "Sigmoid",
    "Softplus",
    "Softmax",
    "GumbelSoftmax",
    "PReLU",
    "Identity",
]
ENCODER_ARCHS = ("mlp", "cnn", "lstm", "simba", "multiinput")


def _check_bounds(name: str, low: float, high: float, value: float | None = None) -> None:
    if low > high:
        raise ValueError(f"min_{name} ({low}) is greater than max_{name} ({high})")
    if value is not None and not low <= value <= high:
        raise ValueError(f"{name} {value} is outside [min_{name}={low}, max_{name}={high}]")


class MlpSpec(StrictModel):
    """A multi-layer perceptron (encoder ``arch: mlp`` or a head)."""

    arch: Literal["mlp"] = Field("mlp", description="Encoder kind.")
    hidden_size: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [64],
        description="Width of each hidden layer; [] for a single linear layer (needs "
        "min_hidden_layers: 0).",
    )
    activation: MlpActivation = Field("ReLU", description="Hidden-layer activation.")
    output_activation: MlpActivation | None = Field(
        None, description="Activation on the output layer; null for none."
    )
    layer_norm: bool = Field(False, description="LayerNorm after each hidden layer.")
    init_layers: bool = Field(True, description="Orthogonal initialisation of the layers.")
    output_vanish: bool = Field(True, description="Scale the output layer's weights down.")
    min_hidden_layers: int = Field(1, ge=0, description="Fewest hidden layers mutation may leave.")
    max_hidden_layers: int = Field(6, gt=1, description="Most hidden layers mutation may add.")
    min_mlp_nodes: int = Field(8, gt=0, description="Narrowest layer mutation may leave.")
    max_mlp_nodes: int = Field(256, gt=1, description="Widest layer mutation may grow.")

    @model_validator(mode="after")
    def _bounds(self) -> MlpSpec:
        _check_bounds(
            "hidden_layers", self.min_hidden_layers, self.max_hidden_layers, len(self.hidden_size)
        )
        _check_bounds("mlp_nodes", self.min_mlp_nodes, self.max_mlp_nodes)
        for width in self.hidden_size:
            _check_bounds("mlp_nodes", self.min_mlp_nodes, self.max_mlp_nodes, width)
        return self


class SimbaSpec(StrictModel):
    """A SimBa residual MLP encoder (``arch: simba``)."""

    arch: Literal["simba"] = Field("simba", description="Encoder kind.")
    hidden_size: int = Field(128, gt=0, description="Width of the residual blocks.")
    num_blocks: int = Field(2, gt=0, description="Number of residual blocks.")
    output_activation: MlpActivation | None = Field(None, description="Output activation.")
    scale_factor: int = Field(4, gt=0, description="Inner expansion of each block.")
    min_blocks: int = Field(1, gt=0, description="Fewest blocks mutation may leave.")
    max_blocks: int = Field(4, gt=1, description="Most blocks mutation may add.")
    min_mlp_nodes: int = Field(8, gt=0, description="Narrowest width mutation may leave.")
    max_mlp_nodes: int = Field(256, gt=1, description="Widest width mutation may grow.")

    @model_validator(mode="after")
    def _bounds(self) -> SimbaSpec:
        _check_bounds("blocks", self.min_blocks, self.max_blocks, self.num_blocks)
        _check_bounds("mlp_nodes", self.min_mlp_nodes, self.max_mlp_nodes, self.hidden_size)
        return self


class CnnSpec(StrictModel):
    """A convolutional encoder for image observations (``arch: cnn``)."""

    arch: Literal["cnn"] = Field("cnn", description="Encoder kind.")
    channel_size: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [32, 32],
        min_length=1,
        description="Output channels per conv layer.",
    )
    kernel_size: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [3, 3], min_length=1, description="Kernel size per conv layer."
    )
    stride_size: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1, 1], min_length=1, description="Stride per conv layer."
    )
    min_hidden_layers: int = Field(1, gt=0, description="Fewest conv layers mutation may leave.")
    max_hidden_layers: int = Field(6, gt=1, description="Most conv layers mutation may add.")
    min_channel_size: int = Field(8, gt=0, description="Fewest channels mutation may leave.")
    max_channel_size: int = Field(256, gt=1, description="Most channels mutation may grow.")
    layer_norm: bool = Field(False, description="Normalisation after each conv layer.")
    init_layers: bool = Field(True, description="Orthogonal initialisation of the layers.")
    activation: MlpActivation = Field("ReLU", description="Activation between conv layers.")

    @model_validator(mode="after")
    def _bounds(self) -> CnnSpec:
        lengths = {len(self.channel_size), len(self.kernel_size), len(self.stride_size)}
        if len(lengths) != 1:
            raise ValueError(
                "channel_size, kernel_size and stride_size must have the same length "
                f"(got {len(self.channel_size)}, {len(self.kernel_size)}, {len(self.stride_size)})"
            )
        _check_bounds(
            "hidden_layers", self.min_hidden_layers, self.max_hidden_layers, len(self.channel_size)
        )
        for channels in self.channel_size:
            _check_bounds("channel_size", self.min_channel_size, self.max_channel_size, channels)
        return self


class LstmSpec(StrictModel):
    """A recurrent LSTM encoder (``arch: lstm``)."""

    arch: Literal["lstm"] = Field("lstm", description="Encoder kind.")
    hidden_state_size: int = Field(64, gt=0, description="LSTM hidden state width.")
    num_layers: int = Field(1, gt=0, description="Stacked LSTM layers.")
    min_hidden_state_size: int = Field(8, gt=0, description="Smallest state mutation may leave.")
    max_hidden_state_size: int = Field(256, gt=1, description="Largest state mutation may grow.")
    min_layers: int = Field(1, ge=0, description="Fewest layers mutation may leave.")
    max_layers: int = Field(6, ge=1, description="Most layers mutation may add.")
    dropout: float = Field(0.0, ge=0.0, le=1.0, description="Dropout between LSTM layers.")

    @model_validator(mode="after")
    def _bounds(self) -> LstmSpec:
        _check_bounds(
            "hidden_state_size",
            self.min_hidden_state_size,
            self.max_hidden_state_size,
            self.hidden_state_size,
        )
        _check_bounds("layers", self.min_layers, self.max_layers, self.num_layers)
        return self


class MultiInputSpec(StrictModel):
    """An encoder for Dict/Tuple observations: one sub-encoder per key (``arch: multiinput``)."""

    arch: Literal["multiinput"] = Field("multiinput", description="Encoder kind.")
    latent_dim: int = Field(32, gt=0, description="Width each sub-encoder maps its input to.")
    vector_space_mlp: bool = Field(False, description="Encode vector keys with an MLP.")
    min_latent_dim: int = Field(8, gt=0, description="Smallest latent mutation may leave.")
    max_latent_dim: int = Field(128, gt=1, description="Largest latent mutation may grow.")
    mlp_config: MlpSpec | None = Field(None, description="Encoder for vector keys.")
    cnn_config: CnnSpec | None = Field(None, description="Encoder for image keys.")

    @model_validator(mode="after")
    def _bounds(self) -> MultiInputSpec:
        _check_bounds("latent_dim", self.min_latent_dim, self.max_latent_dim, self.latent_dim)
        return self


EncoderType = Annotated[
    MlpSpec | CnnSpec | LstmSpec | SimbaSpec | MultiInputSpec, Field(discriminator="arch")
]
_ARCH_HINTS = {
    "channel_size": "cnn",
    "hidden_state_size": "lstm",
    "num_blocks": "simba",
    "cnn_config": "multiinput",
    "mlp_config": "multiinput",
    "vector_space_mlp": "multiinput",
    "hidden_size": "mlp",
}


def infer_arch(encoder_config: dict[str, Any]) -> str | None:
    """Guess an encoder's ``arch`` from the keys it sets, or ``None`` if nothing tells.

    Sub-encoder keys (``mlp_config``, ``cnn_config``, ``vector_space_mlp``) mean a
    multi-input layout; the network builder fits it to the observation space
    (Dict: one CNN per image key and the vector keys concatenated; a single
    image: its ``cnn_config``; a flat vector: its ``mlp_config``).
    """
    for key, arch in _ARCH_HINTS.items():
        if key in encoder_config:
            return arch
    return None


_NORMALIZE_REFUSALS = {
    "simba": "the SimBa encoder normalises its observations already",
    "cnn": "a cnn encoder reads images, which algorithm.normalize_images scales to [0, 1]",
    "multiinput": "Dict and Tuple observations (arch multiinput) are not normalised",
    "lstm": "a recurrent (lstm) policy does not normalise observations (the padding of its "
    "BPTT sequences would enter the statistics)",
}
"""Encoders ``normalize_observations`` cannot act on, and why."""


class NetworkSpec(StrictModel):
    """An RL network: an encoder (chosen by ``arch``) feeding an MLP head.

    ``arch`` may be written at the top of the section or inside
    ``encoder_config``. Leave ``encoder_config`` out to infer the encoder from
    the observation space when the run starts (image -> cnn, Dict -> multiinput,
    else mlp).
    """

    latent_dim: int = Field(64, gt=0, description="Width of the encoder's output.")
    min_latent_dim: int = Field(8, gt=0, description="Smallest latent mutation may leave.")
    max_latent_dim: int = Field(128, gt=1, description="Largest latent mutation may grow.")
    encoder_config: EncoderType | None = Field(
        None, description="Encoder settings, discriminated by arch; null infers it at build time."
    )
    head_config: MlpSpec | None = Field(None, description="MLP head settings.")
    random_seed: int | None = Field(None, description="Seed for network initialisation.")
    simba: bool = Field(False, description="Use a SimBa encoder (set when arch is simba).")
    squash_output: bool = Field(False, description="Squash continuous actions with tanh.")
    normalize_observations: bool = Field(
        False,
        description="Normalise flat vector observations by their running mean and variance "
        "(fit on the batches the agent learns from, frozen when acting and evaluating, "
        "clipped to +-10, saved with the weights); mlp encoders of single-agent algorithms.",
    )

    @model_validator(mode="before")
    @classmethod
    def _normalise_arch(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        arch = data.pop("arch", None)
        encoder = data.get("encoder_config")
        if isinstance(encoder, dict):
            encoder = dict(encoder)
            arch = encoder.get("arch", arch) or infer_arch(encoder)
            if arch is None and encoder:
                raise ValueError(
                    "encoder_config does not say which encoder it configures: set arch "
                    f"to one of {', '.join(ENCODER_ARCHS)}"
                )
            if arch is not None:
                encoder["arch"] = arch
                data["encoder_config"] = encoder
            else:
                data["encoder_config"] = None
        elif encoder is None and arch is not None:
            data["encoder_config"] = {"arch": arch}
        return data

    @model_validator(mode="after")
    def _bounds(self) -> NetworkSpec:
        _check_bounds("latent_dim", self.min_latent_dim, self.max_latent_dim, self.latent_dim)
        if isinstance(self.encoder_config, SimbaSpec) and not self.simba:
            object.__setattr__(self, "simba", True)
        if self.normalize_observations:
            refusal = _NORMALIZE_REFUSALS.get("simba" if self.simba else self.arch)
            if refusal is not None:
                raise ValueError(
                    f"normalize_observations: {refusal}; remove network.normalize_observations"
                )
        return self

    @property
    def arch(self) -> str | None:
        """The encoder kind, or ``None`` when it is inferred at build time."""
        return self.encoder_config.arch if self.encoder_config else None


class QNetworkSpec(NetworkSpec):
    """Network of a value-based agent (DQN, CQN, bandits)."""


class RainbowQNetworkSpec(NetworkSpec):
    """Network of Rainbow DQN (dueling, noisy, distributional head)."""


class ContinuousQNetworkSpec(NetworkSpec):
    """Critic of a continuous-control agent."""


class DeterministicActorSpec(NetworkSpec):
    """Actor of DDPG, TD3, MADDPG and MATD3."""


class StochasticActorSpec(NetworkSpec):
    """Actor of PPO and IPPO."""


class ValueNetworkSpec(NetworkSpec):
    """State-value critic."""


class LoraConfigDict(StrictModel):
    """LoRA adapter settings, converted to a ``peft.LoraConfig`` by the LLM builder."""

    lora_r: int = Field(16, ge=1, description="Adapter rank (peft's r).")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling numerator.")
    target_modules: list[str] | str = Field(
        "all-linear", description="Module names to adapt, or 'all-linear'."
    )
    target_parameters: list[str] | None = Field(
        None, description="MoE expert parameters to adapt; requires lora_dropout 0."
    )
    task_type: str = Field("CAUSAL_LM", min_length=1, description="peft task type.")
    modules_to_save: list[str] | None = Field(
        None, description="Modules trained in full next to the adapter (e.g. ['lm_head'])."
    )
    lora_dropout: float = Field(0.05, ge=0.0, le=1.0, description="Dropout on the adapter input.")

    @model_validator(mode="before")
    @classmethod
    def _sorted_modules(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("target_modules"), set | frozenset):
            data = {**data, "target_modules": sorted(data["target_modules"])}
        return data

    @model_validator(mode="after")
    def _moe(self) -> LoraConfigDict:
        if self.target_parameters and self.lora_dropout != 0:
            raise ValueError("target_parameters requires lora_dropout: 0")
        return self


class FinetuningNetworkSpec(StrictModel):
    """The ``network`` section of an LLM run; lifted onto the algorithm at validation."""

    pretrained_model_name_or_path: str = Field(
        ..., min_length=1, description="Hub id or local path of the model to fine-tune."
    )
    max_context_length: int = Field(
        1024, ge=1, description="Prompt plus completion tokens (becomes algorithm.max_model_len)."
    )
    lora_config: LoraConfigDict | None = Field(
        None, description="LoRA adapter; null trains all weights."
    )
