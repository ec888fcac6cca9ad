"""Draws a ``Scene`` to a byte-deterministic RGB image without anti-aliasing or font files.

Text uses Pillow's built-in bitmap font drawn on a small canvas and enlarged with NEAREST, so the same
scene gives the same pixels on every machine.
"""

from __future__ import annotations

import hashlib
import io
import math

from PIL import Image, ImageDraw, ImageFont

from sparsectx.data.scenes import Scene, SceneObject

Palette = dict[str, list[int]]

# Vertex count and inner-radius ratio of each polygon shape; circle and square are drawn directly.
_POLYGONS = {"triangle": (3, 1.0), "diamond": (4, 1.0), "hexagon": (6, 1.0), "star": (10, 0.45)}
SHAPES = frozenset({"circle", "square", *_POLYGONS})


def _font() -> ImageFont.ImageFont:
    return ImageFont.load_default_imagefont()


def text_size(word: str, scale: int) -> tuple[int, int]:
    """Returns (width, height) in pixels of ``word`` drawn at integer ``scale``."""
    x0, y0, x1, y1 = _font().getbbox(word)
    return (x1 - x0) * scale, (y1 - y0) * scale


def _polygon(obj: SceneObject, vertices: int, inner: float) -> list[tuple[float, float]]:
    radius = obj.size / 2
    points = []
    for k in range(vertices):
        # Start at the top (-90 degrees) so triangles and stars point up.
        angle = -math.pi / 2 + 2 * math.pi * k / vertices
        r = radius * inner if k % 2 else radius  # inner < 1 only for stars
        points.append((obj.cx + r * math.cos(angle), obj.cy + r * math.sin(angle)))
    return points


def _draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject, rgb: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = obj.box
    if obj.shape == "circle":
        draw.ellipse((x0, y0, x1 - 1, y1 - 1), fill=rgb)
    elif obj.shape == "square":
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=rgb)
    elif obj.shape in _POLYGONS:
        vertices, inner = _POLYGONS[obj.shape]
        draw.polygon(_polygon(obj, vertices, inner), fill=rgb)
    else:
        raise ValueError(f"unknown shape {obj.shape!r}; drawable shapes: {sorted(SHAPES)}")


def _draw_text(image: Image.Image, scene: Scene, rgb: tuple[int, int, int]) -> None:
    label = scene.text
    if label is None:
        return
    font = _font()
    x0, y0, x1, y1 = font.getbbox(label.word)
    mask = Image.new("L", (x1 - x0, y1 - y0), 0)
    ImageDraw.Draw(mask).text((-x0, -y0), label.word, fill=255, font=font)
    mask = mask.resize((label.width, label.height), Image.Resampling.NEAREST)
    image.paste(Image.new("RGB", mask.size, rgb), (label.x, label.y), mask)


def render_image(scene: Scene, palette: Palette, background: list[int]) -> Image.Image:
    """Returns the RGB image of ``scene`` (objects in list order, then the word on top)."""
    image = Image.new("RGB", (scene.image_size, scene.image_size), tuple(background))
    draw = ImageDraw.Draw(image)
    for obj in scene.objects:
        _draw_object(draw, obj, tuple(palette[obj.color]))
    if scene.text is not None:
        _draw_text(image, scene, tuple(palette[scene.text.color]))
    return image


def encode_png(image: Image.Image) -> bytes:
    """Returns the PNG bytes of ``image`` (Pillow writes no timestamp, so equal pixels give equal bytes)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def pixel_hash(image: Image.Image) -> str:
    """Returns the sha256 hex digest of the image's size and RGB pixels (independent of the file encoding)."""
    rgb = image.convert("RGB")
    digest = hashlib.sha256(f"{rgb.width}x{rgb.height}:".encode())
    digest.update(rgb.tobytes())
    return digest.hexdigest()
