"""Video input for the Qwen-VL families without torchvision: frames to temporal patches, prompt expansion.

transformers' Qwen-VL video processors run on torchvision; the project composes its own from the PIL image
processor (``sparsectx.models.processor``). A clip's sampled frames are resized to one size, each frame is
rescaled, normalised and patchified by the family's image processor, and consecutive frames are stacked
into temporal patches of ``temporal_patch_size`` frames (the last frame repeated to fill the final one),
giving the row layout of HF's ``Qwen2VLVideoProcessor``: (t, h/m, w/m, m, m) patches of
(C, temporal_patch_size, p, p) values, and a grid (t, h, w).

The families place a video in the prompt differently (each record's ``FamilySpec.video_layout``):

- ``grid`` (Qwen2.5-VL): ``<|video_pad|>`` becomes one run of t*h*w/m^2 pads; positions space the temporal
  patches by ``tokens_per_second * int(second_per_grid_t)`` (transformers 5.17's ``get_rope_index``), with
  ``second_per_grid_t = temporal_patch_size / sampled fps``.
- ``timestamps`` (Qwen3-VL, Qwen3.5): the chat template's ``<|vision_start|><|video_pad|><|vision_end|>``
  becomes, per temporal patch, ``<{t:.1f} seconds><|vision_start|>`` + h*w/m^2 pads + ``<|vision_end|>``,
  t the mean time of the patch's first and last frame (the Qwen3-VL processor's ``_calculate_timestamps``);
  each frame group takes image positions (``get_rope_index`` splits the grid into t grids of one frame).
  transformers 5.17's ``Qwen3VLProcessor`` replaces only the pad token, nesting the groups inside the
  template's own start/end markers; we follow the released Qwen3-VL layout, one start/end pair per group.
- ``glm_frames`` (GLM-4.6V): the template's ``<|video|>`` (inside ``<|begin_of_video|>`` ...
  ``<|end_of_video|>``) becomes, per temporal patch, ``<|begin_of_image|>`` + h*w/m^2 image tokens +
  ``<|end_of_image|>{t:.1f} seconds``, t the patch's first frame's time (``Glm46VProcessor``); the tower
  runs each temporal patch as its own (1, h, w) grid (``get_video_features``), and each group takes image
  positions. A video's slots are image tokens; the video segment markers tell them apart.

Families whose record declares no layout are refused with an error naming the family (``check_video_family``).
"""

from __future__ import annotations

import math

import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from sparsectx.data.video import Video, VideoError
from sparsectx.models.family import FAMILIES, PROCESSOR_ONLY_FAMILY

VIDEO_TOKEN = "<|video_pad|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
GLM_VIDEO_TOKEN, GLM_IMAGE_TOKEN = "<|video|>", "<|image|>"
GLM_VIDEO_START, GLM_VIDEO_END = "<|begin_of_video|>", "<|end_of_video|>"
GLM_FRAME_START, GLM_FRAME_END = "<|begin_of_image|>", "<|end_of_image|>"


def video_refusal(family: str, key: str) -> ValueError:
    """Returns the config error for video input on ``family``, naming the key that asked for it."""
    supported = sorted(spec.name for spec in FAMILIES if spec.video_layout is not None)
    return ValueError(
        f"{key}: model family {family!r} has no video input in sparsectx (its processor places video tokens "
        f"its own way and that path is not built); video benchmarks run on model families {supported}"
    )


def check_video_family(family: str, key: str) -> str:
    """Returns the video layout of ``family`` (its record's ``video_layout``; "" = a processor-only folder, the
    tiny model's family); raises ``video_refusal`` when it has none."""
    name = family or PROCESSOR_ONLY_FAMILY
    layout = FAMILIES.by_name(name).video_layout if name in FAMILIES.names() else None
    if layout is None:
        raise video_refusal(family, key)
    return layout


def frame_size(video: Video, image_processor: object) -> tuple[int, int]:
    """Returns the (height, width) every frame of ``video`` is resized to.

    The image processor's pixel bounds apply per frame, and ``video.max_tokens`` caps the clip: each of its
    t temporal patches gets at most ``max_tokens // t`` post-merger tokens.

    Raises:
        VideoError: the cap leaves less than one token per temporal patch, or the frames' aspect ratio is
            beyond what the processor resizes (naming the video's source).
    """
    patch, merge = int(image_processor.patch_size), int(image_processor.merge_size)
    factor = patch * merge
    groups = math.ceil(len(video.frames) / int(image_processor.temporal_patch_size))
    longest, shortest = image_processor.size["longest_edge"], image_processor.size["shortest_edge"]
    if video.max_tokens is not None:
        per_group = video.max_tokens // groups
        if per_group < 1:
            raise VideoError(
                f"{video.source}: max_tokens={video.max_tokens} leaves no token for each of {groups} "
                "temporal patches; raise the cap or sample fewer frames"
            )
        longest = min(longest, per_group * factor * factor)
    width, height = video.frames[0].size
    try:
        return smart_resize(height, width, factor, min(shortest, longest), longest)
    except ValueError as error:
        raise VideoError(f"{video.source}: frame size {width}x{height} cannot be processed ({error})") from error


def video_patches(video: Video, image_processor: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (pixel rows (t*h*w, C*T*p*p), grid (3,)) of ``video``'s frames in HF's video-patch layout."""
    height, width = frame_size(video, image_processor)
    frames = [frame.resize((width, height), Image.Resampling.BICUBIC) for frame in video.frames]
    out = image_processor(images=frames, do_resize=False, return_tensors="pt")
    temporal, patch = int(image_processor.temporal_patch_size), int(image_processor.patch_size)
    per_frame = out["image_grid_thw"][0]
    spatial = int(per_frame[1] * per_frame[2])
    rows = out["pixel_values"].view(len(frames), spatial, -1, temporal, patch, patch)[:, :, :, 0]
    groups = math.ceil(len(frames) / temporal)
    pad = groups * temporal - len(frames)
    rows = torch.cat([rows, rows[-1:].expand(pad, *rows.shape[1:])]) if pad else rows
    rows = rows.view(groups, temporal, spatial, -1, patch, patch).permute(0, 2, 3, 1, 4, 5)
    grid = torch.tensor([groups, int(per_frame[1]), int(per_frame[2])])
    return rows.reshape(groups * spatial, -1), grid


def group_timestamps(video: Video, temporal: int) -> list[float]:
    """Returns each temporal patch's time in seconds: the mean of its first and last frame's (Qwen3-VL)."""
    times = video.timestamps()
    times += [times[-1]] * (-len(times) % temporal)
    return [(times[i] + times[i + temporal - 1]) / 2 for i in range(0, len(times), temporal)]


def video_placeholder(layout: str, video: Video, grid: torch.Tensor, merge_unit: int, temporal: int) -> str:
    """Returns the prompt text that stands for one video (see the module doc for each layout)."""
    t, h, w = (int(v) for v in grid)
    per_group = h * w // merge_unit
    if layout == "grid":
        return VIDEO_TOKEN * (t * per_group)
    if layout == "glm_frames":
        starts = video.timestamps()[::temporal]
        return "".join(
            f"{GLM_FRAME_START}{GLM_IMAGE_TOKEN * per_group}{GLM_FRAME_END}{stamp:.1f} seconds" for stamp in starts
        )
    return "".join(
        f"<{stamp:.1f} seconds>{VISION_START}{VIDEO_TOKEN * per_group}{VISION_END}"
        for stamp in group_timestamps(video, temporal)
    )


def video_marker(layout: str) -> str:
    """Returns the templated text one video part renders to, which ``video_placeholder`` replaces."""
    return {"grid": VIDEO_TOKEN, "glm_frames": GLM_VIDEO_TOKEN}.get(layout, f"{VISION_START}{VIDEO_TOKEN}{VISION_END}")


def video_slots(ids: torch.Tensor, layout: str, tokenizer: object) -> torch.Tensor:
    """Returns (B, L) bool, True at the video tokens' slots of a batch's ``ids`` (``mm_token_type_ids`` 2).

    GLM-4.6V's video frames are image tokens between its video start and end markers; the Qwen families'
    are the video pad.
    """
    get = tokenizer.convert_tokens_to_ids
    if layout != "glm_frames":
        return ids == get(VIDEO_TOKEN)
    inside = (ids == get(GLM_VIDEO_START)).cumsum(-1) > (ids == get(GLM_VIDEO_END)).cumsum(-1)
    return inside & (ids == get(GLM_IMAGE_TOKEN))


def second_per_grid(video: Video, temporal: int) -> float:
    """Returns seconds per temporal patch, ``temporal_patch_size / sampled fps`` (Qwen2.5-VL's processor)."""
    return temporal / video.sampled_fps
