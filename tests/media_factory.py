"""Build tiny random-weight image and audio models on disk, and test media made on the spot.

No hub access: the processors are built from their classes with small sizes; CLIP's and
the captioner's text sides reuse the MiniLM vocabulary or the tiny GPT-2's BPE.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from tests.model_factory import _done, build_tiny_gpt2, minilm_path

IMAGE_SIZE = 32
PATCH = 8
SAMPLING_RATE = 16_000


def _save(dest: Path, model: object, *processors: object) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for processor in processors:
        processor.save_pretrained(str(dest))  # type: ignore[attr-defined]
    model.save_pretrained(str(dest))  # type: ignore[attr-defined]
    return dest


def _image_processor() -> object:
    from transformers import ViTImageProcessor

    return ViTImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})


def _vit_shape() -> dict[str, int]:
    return dict(image_size=IMAGE_SIZE, patch_size=PATCH, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=64)


# ViT-S/16 at 224 pixels (DeiT-small's shape): a model whose compute, not the route, dominates.
VIT_SMALL = dict(image_size=224, patch_size=16, hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                 intermediate_size=1536)


def build_vit_classifier(dest: Path, labels: tuple[str, ...] = ("cat", "dog", "bird"),
                         shape: dict[str, int] | None = None) -> Path:
    """A random ViTForImageClassification with labels: tiny, or of shape (e.g. VIT_SMALL)."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    dest = Path(dest)
    if _done(dest):
        return dest
    id2label = {i: label for i, label in enumerate(labels)}
    shape = shape or _vit_shape()
    config = ViTConfig(**shape, num_labels=len(labels), id2label=id2label,
                       label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(0)
    side = shape["image_size"]
    return _save(dest, ViTForImageClassification(config).eval(),
                 ViTImageProcessor(size={"height": side, "width": side}))


def build_tiny_clip(dest: Path) -> Path:
    """A tiny CLIPModel (text and vision towers, one projection space) with the MiniLM vocabulary."""
    import torch
    from transformers import AutoTokenizer, CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    dest = Path(dest)
    if _done(dest):
        return dest
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()))
    tokenizer.model_max_length = 64
    text = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    vision = dict(_vit_shape(), num_channels=3)
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    torch.manual_seed(0)
    images = CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = CLIPProcessor(image_processor=images, tokenizer=tokenizer)
    return _save(dest, CLIPModel(config).eval(), processor)


def build_yolos_detector(dest: Path, labels: tuple[str, ...] = ("cat", "dog")) -> Path:
    """A tiny YOLOS object detector (a ViT backbone: no timm)."""
    import torch
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    dest = Path(dest)
    if _done(dest):
        return dest
    id2label = {i: label for i, label in enumerate(labels)}
    config = YolosConfig(image_size=[IMAGE_SIZE, IMAGE_SIZE], patch_size=PATCH, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64, num_detection_tokens=5,
                         num_labels=len(labels), id2label=id2label, label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(0)
    processor = YolosImageProcessor(size={"shortest_edge": IMAGE_SIZE, "longest_edge": IMAGE_SIZE})
    return _save(dest, YolosForObjectDetection(config).eval(), processor)


def build_captioner(dest: Path) -> Path:
    """A tiny ViT + GPT-2 VisionEncoderDecoderModel with the tiny GPT-2's tokenizer."""
    import torch
    from transformers import (
        AutoTokenizer,
        GPT2Config,
        VisionEncoderDecoderConfig,
        VisionEncoderDecoderModel,
        ViTConfig,
    )

    dest = Path(dest)
    if _done(dest):
        return dest
    gpt2 = build_tiny_gpt2(dest.parent / f"{dest.name}-gpt2")
    tokenizer = AutoTokenizer.from_pretrained(str(gpt2))
    decoder = GPT2Config.from_pretrained(str(gpt2))
    decoder.is_decoder, decoder.add_cross_attention = True, True
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(ViTConfig(**_vit_shape()), decoder)
    config.decoder_start_token_id = config.pad_token_id = config.eos_token_id = tokenizer.eos_token_id
    torch.manual_seed(0)
    model = VisionEncoderDecoderModel(config=config).eval()
    model.generation_config.decoder_start_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.max_new_tokens = 8
    return _save(dest, model, _image_processor(), tokenizer)


def _wav2vec2_shape() -> dict[str, object]:
    # wav2vec2's own feature encoder strides (320 samples a frame: 50 frames a second), in 16 channels.
    return dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                conv_dim=(16,) * 7, conv_stride=(5, 2, 2, 2, 2, 2, 2), conv_kernel=(10, 3, 3, 3, 3, 2, 2),
                num_feat_extract_layers=7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)


def _audio_features() -> object:
    from transformers import Wav2Vec2FeatureExtractor

    return Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SAMPLING_RATE, padding_value=0.0,
                                    do_normalize=True, return_attention_mask=True)


def build_audio_classifier(dest: Path, labels: tuple[str, ...] = ("speech", "music", "noise")) -> Path:
    """A tiny Wav2Vec2ForSequenceClassification."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification

    dest = Path(dest)
    if _done(dest):
        return dest
    id2label = {i: label for i, label in enumerate(labels)}
    config = Wav2Vec2Config(**_wav2vec2_shape(), num_labels=len(labels), id2label=id2label,
                            label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(0)
    return _save(dest, Wav2Vec2ForSequenceClassification(config).eval(), _audio_features())


def build_ctc_recognizer(dest: Path) -> Path:
    """A tiny Wav2Vec2ForCTC with a character vocabulary."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2ForCTC, Wav2Vec2Processor

    dest = Path(dest)
    if _done(dest):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4,
             **{c: i + 5 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz'")}}
    (dest / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(str(dest / "vocab.json"), word_delimiter_token="|")
    config = Wav2Vec2Config(**_wav2vec2_shape(), vocab_size=len(vocab), pad_token_id=0, ctc_loss_reduction="mean")
    torch.manual_seed(0)
    processor = Wav2Vec2Processor(feature_extractor=_audio_features(), tokenizer=tokenizer)
    return _save(dest, Wav2Vec2ForCTC(config).eval(), processor)


def build_tiny_whisper(dest: Path, languages: tuple[str, ...] = ("en", "fr")) -> Path:
    """A tiny random WhisperForConditionalGeneration: a byte-level vocabulary, Whisper's special tokens, 8 mel bins."""
    import torch
    from transformers import (WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperProcessor, WhisperTokenizer)

    dest = Path(dest)
    if _done(dest):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    # GPT-2's byte alphabet (what a byte-level BPE writes each byte as), with no merges.
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shown = {b: b for b in printable} | {b: 256 + n for n, b in enumerate(b for b in range(256) if b not in printable)}
    vocab = {chr(shown[b]): b for b in range(256)}
    specials = ["<|endoftext|>", "<|startoftranscript|>", *(f"<|{code}|>" for code in languages), "<|translate|>",
                "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
    ids = {token: len(vocab) + n for n, token in enumerate(specials)}
    (dest / "vocab.json").write_text(json.dumps({**vocab, **ids}))
    (dest / "merges.txt").write_text("#version: 0.2\n")
    end = ids["<|endoftext|>"]
    tokenizer = WhisperTokenizer(str(dest / "vocab.json"), str(dest / "merges.txt"), unk_token="<|endoftext|>",
                                 bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    features = WhisperFeatureExtractor(feature_size=8, sampling_rate=SAMPLING_RATE, chunk_length=2, hop_length=160,
                                       n_fft=64)
    config = WhisperConfig(vocab_size=len(vocab) + len(ids), num_mel_bins=8, d_model=16, encoder_layers=1,
                           decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                           decoder_ffn_dim=32, max_source_positions=100, max_target_positions=64, pad_token_id=end,
                           bos_token_id=end, eos_token_id=end, decoder_start_token_id=ids["<|startoftranscript|>"],
                           suppress_tokens=[], begin_suppress_tokens=[])
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    generation = model.generation_config
    generation.lang_to_id = {f"<|{code}|>": ids[f"<|{code}|>"] for code in languages}
    generation.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    generation.is_multilingual = True
    generation.no_timestamps_token_id = ids["<|notimestamps|>"]
    generation.forced_decoder_ids = None
    generation.max_new_tokens = 6
    generation._from_model_config = False  # else loading rebuilds it from the model's config, without the languages
    return _save(dest, model, WhisperProcessor(feature_extractor=features, tokenizer=tokenizer))


# Media made in the tests.

def png(width: int = 48, height: int = 40, mode: str = "RGB", fmt: str = "PNG", **save: object) -> bytes:
    """A drawing (a red square on blue, a green circle) in the given mode and format."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), (20, 40, 200))
    draw = ImageDraw.Draw(image)
    draw.rectangle((width // 8, height // 8, width // 2, height // 2), fill=(220, 30, 30))
    draw.ellipse((width // 2, height // 2, width - 1, height - 1), fill=(30, 200, 60))
    if mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt, **save)
    return out.getvalue()


def tone(seconds: float = 0.5, rate: int = SAMPLING_RATE, channels: int = 1, fmt: str = "WAV",
         frequency: float = 440.0) -> bytes:
    """A sine tone as a WAV or FLAC file."""
    import numpy as np
    import soundfile

    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * math.pi * frequency * t).astype("float32")
    data = np.stack([wave] * channels, axis=1) if channels > 1 else wave
    out = io.BytesIO()
    soundfile.write(out, data, rate, format=fmt, subtype="PCM_16")
    return out.getvalue()
