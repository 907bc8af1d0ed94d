"""Export problems meant for people: the CLI prints them and exits with code 2."""

from __future__ import annotations

from ..errors import AccelError


class ExportError(AccelError):
    """A model, run directory or option that cannot be exported as asked."""


class UnsupportedOpError(ExportError):
    """The chosen format has no translation for an operator the model uses."""

    def __init__(self, op: str, fmt: str, alternatives: list[str]):
        self.op, self.format = op, fmt
        others = "".join(f"`--format {alt}` or " for alt in alternatives)
        super().__init__(
            f"The model uses `{op}`, which the {fmt} exporter cannot translate. Try {others}replacing that op in "
            f"the model (for ONNX, a custom translation can be registered with "
            f"torch.onnx.export(custom_translation_table=...))."
        )


class QuantizeError(ExportError):
    """A quantization mode the model or the format cannot take."""
