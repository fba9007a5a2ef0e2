//! Decoding and preprocessing, identical on both sides of the split.
//!
//! The weights expect the TensorFlow EfficientNet evaluation pipeline: a centre crop of
//! `224 / 256` of the short side, a bicubic resize to 224x224 (as Pillow computes it, with its
//! anti-aliasing support and 8-bit fixed-point arithmetic), then `(x - 127) / 128` per channel.

mod resample;

use ::image::ImageDecoder;
use ::image::metadata::Orientation;
#[cfg(feature = "model")]
use burn::tensor::{Device, Tensor, TensorData};

use crate::error::{Error, Result};
use crate::model::INPUT_SIZE;

pub use resample::resize_bicubic;

/// The centre crop keeps `size / (size + CROP_PADDING)` of the short side: 224 of 256 at 224.
pub const CROP_PADDING: usize = 32;
/// Largest image (in pixels) we agree to decode, so a hostile upload cannot exhaust memory:
/// 16 MP is 48 MB of RGB. JPEGs are decoded at a reduced scale first (see [`JPEG_MIN_SHORT_SIDE`]),
/// so a 40 MP photo decodes to under 1 MP; the cap binds PNGs, whose decoders cannot scale.
pub const MAX_DECODED_PIXELS: u64 = 16_000_000;
/// A JPEG whose short side is at least twice this is decoded at 1/2, 1/4 or 1/8 scale (its
/// DCT blocks reduced while decoding: no full-size pixels are ever made), keeping the short
/// side at least this long: twice the 256-pixel short side the 224 crop comes from, so the
/// bicubic resize still averages over 2 × 2 decoded pixels or more.
pub const JPEG_MIN_SHORT_SIDE: usize = 512;

/// An 8-bit RGB image, row-major, channels interleaved (`HWC`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `height * width * 3` bytes.
    pub pixels: Vec<u8>,
}

impl RgbImage {
    /// Wrap raw HWC pixels.
    ///
    /// # Errors
    /// [`Error::ImageDecode`] when the length is not `width * height * 3`.
    pub fn new(width: usize, height: usize, pixels: Vec<u8>) -> Result<Self> {
        if pixels.len() != width * height * 3 || width == 0 || height == 0 {
            return Err(Error::ImageDecode(format!(
                "{} bytes is not a {width}x{height} RGB image",
                pixels.len()
            )));
        }
        Ok(Self { width, height, pixels })
    }

    /// Copy out a rectangle.
    ///
    /// # Panics
    /// When the rectangle is not inside the image.
    pub fn crop(&self, left: usize, top: usize, w: usize, h: usize) -> Self {
        let mut pixels = Vec::with_capacity(w * h * 3);
        for y in top..top + h {
            let start = (y * self.width + left) * 3;
            pixels.extend_from_slice(&self.pixels[start..start + w * 3]);
        }
        Self { width: w, height: h, pixels }
    }
}

/// JPEG start-of-image marker.
const JPEG_SOI: [u8; 2] = [0xff, 0xd8];
/// JPEG end-of-image marker.
const JPEG_EOI: [u8; 2] = [0xff, 0xd9];

/// Decode RGB and greyscale JPEGs with `jpeg-decoder`, whose integer IDCT and chroma upsampling
/// stay within a few grey levels of libjpeg-turbo (what Pillow, and so the reference, uses);
/// measured on the 500 dev photos: max difference 4 against 20 for the `image` crate's decoder.
/// Returns `None` for colour spaces it does not produce as RGB (CMYK), which go to `image`.
fn decode_jpeg(bytes: &[u8]) -> Option<Result<(RgbImage, Orientation)>> {
    // A JPEG ends with an end-of-image marker. Without one the file was cut short, and the
    // decoder would fill the missing rows with grey: a tiny upload could declare a huge image
    // and cost its full decoding time and memory (and a classification of nothing).
    if !bytes.windows(2).any(|w| w == JPEG_EOI) {
        return Some(Err(Error::ImageDecode("truncated JPEG (no end-of-image marker)".into())));
    }
    let mut decoder = jpeg_decoder::Decoder::new(bytes);
    if let Err(e) = decoder.read_info() {
        return Some(Err(Error::ImageDecode(e.to_string())));
    }
    let info = decoder.info()?;
    let (full_w, full_h) = (usize::from(info.width), usize::from(info.height));
    let short = full_w.min(full_h).max(1);
    let (w, h) = if short >= 2 * JPEG_MIN_SHORT_SIDE {
        let at = |side: usize| (side * JPEG_MIN_SHORT_SIDE).div_ceil(short).min(65535) as u16;
        match decoder.scale(at(full_w), at(full_h)) {
            Ok((w, h)) => (usize::from(w), usize::from(h)),
            Err(e) => return Some(Err(Error::ImageDecode(e.to_string()))),
        }
    } else {
        (full_w, full_h)
    };
    if (w * h) as u64 > MAX_DECODED_PIXELS {
        return Some(Err(Error::ImageDecode(format!(
            "{w}x{h} is larger than {MAX_DECODED_PIXELS} pixels"
        ))));
    }
    let pixels = match decoder.decode() {
        Ok(p) => p,
        Err(e) => return Some(Err(Error::ImageDecode(e.to_string()))),
    };
    let orientation = decoder
        .exif_data()
        .and_then(exif_orientation)
        .and_then(Orientation::from_exif)
        .unwrap_or(Orientation::NoTransforms);
    let img = match info.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => RgbImage::new(w, h, pixels),
        jpeg_decoder::PixelFormat::L8 => {
            RgbImage::new(w, h, pixels.iter().flat_map(|v| [*v; 3]).collect())
        }
        _ => return None,
    };
    Some(img.map(|img| (img, orientation)))
}

/// The orientation tag (0x0112, 1-8) of an EXIF block's first directory: the TIFF structure
/// after the `Exif\0\0` marker, little- (`II`) or big-endian (`MM`). `None` when the block is
/// cut short, malformed, or has no such tag (the photo is then taken as stored).
fn exif_orientation(tiff: &[u8]) -> Option<u8> {
    let little = match tiff.get(..4)? {
        [b'I', b'I', 42, 0] => true,
        [b'M', b'M', 0, 42] => false,
        _ => return None,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b: [u8; 2] = tiff.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if little { u16::from_le_bytes(b) } else { u16::from_be_bytes(b) })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = tiff.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if little { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) })
    };
    /// A directory entry: tag, type, count, then the value (or its offset) in 4 bytes.
    const ENTRY: usize = 12;
    /// The TIFF type SHORT: an orientation is one of them, held in the entry itself.
    const SHORT: u16 = 3;
    let directory = usize::try_from(u32_at(4)?).ok()?;
    let entries = usize::from(u16_at(directory)?);
    (0..entries).find_map(|i| {
        let at = directory.checked_add(2 + i * ENTRY)?;
        if u16_at(at)? != 0x0112 || u16_at(at + 2)? != SHORT || u32_at(at + 4)? != 1 {
            return None;
        }
        u8::try_from(u16_at(at + 8)?).ok()
    })
}

/// Turn decoded pixels the way their EXIF orientation says the photo is meant to be seen:
/// phones store portraits sideways and say so in the file, and a browser shows them upright,
/// so the model must see them upright too (on the edge, on the server and in `auto` alike).
fn apply_orientation(img: RgbImage, orientation: Orientation) -> Result<RgbImage> {
    if orientation == Orientation::NoTransforms {
        return Ok(img);
    }
    let (w, h) = (img.width as u32, img.height as u32);
    let buffer = ::image::RgbImage::from_raw(w, h, img.pixels)
        .ok_or_else(|| Error::ImageDecode("decoded pixels do not fill the image".into()))?;
    let mut turned = ::image::DynamicImage::ImageRgb8(buffer);
    turned.apply_orientation(orientation);
    let rgb = turned.into_rgb8();
    let (w, h) = rgb.dimensions();
    RgbImage::new(w as usize, h as usize, rgb.into_raw())
}

/// Decode JPEG or PNG bytes (any colour type) to RGB, turned upright by their EXIF orientation.
///
/// # Errors
/// [`Error::ImageDecode`] for unknown formats, corrupt data, or images over
/// [`MAX_DECODED_PIXELS`].
pub fn decode(bytes: &[u8]) -> Result<RgbImage> {
    if bytes.starts_with(&JPEG_SOI)
        && let Some(result) = decode_jpeg(bytes)
    {
        let (img, orientation) = result?;
        return apply_orientation(img, orientation);
    }
    let reader = ::image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| Error::ImageDecode(e.to_string()))?;
    if reader.format().is_none() {
        return Err(Error::ImageDecode("not a JPEG or PNG image".into()));
    }
    // The header alone says how large the image is, before any pixel is decoded.
    let mut decoder = reader.into_decoder().map_err(|e| Error::ImageDecode(e.to_string()))?;
    let (w, h) = decoder.dimensions();
    if u64::from(w) * u64::from(h) > MAX_DECODED_PIXELS {
        return Err(Error::ImageDecode(format!(
            "{w}x{h} is larger than {MAX_DECODED_PIXELS} pixels"
        )));
    }
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let mut img = ::image::DynamicImage::from_decoder(decoder)
        .map_err(|e| Error::ImageDecode(e.to_string()))?;
    img.apply_orientation(orientation);
    let rgb = img.to_rgb8();
    let (w, h) = rgb.dimensions();
    RgbImage::new(w as usize, h as usize, rgb.into_raw())
}

/// Decode an image that is already the network's input (centre-cropped and resized by the
/// client), without cropping it again.
///
/// # Errors
/// [`Error::ImageDecode`] for undecodable bytes or a size other than `224x224`.
pub fn decode_input(bytes: &[u8]) -> Result<RgbImage> {
    let img = decode(bytes)?;
    if (img.width, img.height) != (INPUT_SIZE, INPUT_SIZE) {
        return Err(Error::ImageDecode(format!(
            "a model-input upload must be {INPUT_SIZE}x{INPUT_SIZE}, got {}x{}",
            img.width, img.height
        )));
    }
    Ok(img)
}

/// Centre crop of `size / (size + CROP_PADDING)` of the short side, bicubic resize to
/// `size` x `size`.
pub fn center_crop_resize(img: &RgbImage, size: usize) -> RgbImage {
    let short = img.width.min(img.height) as f64;
    // Python's round(): ties to even, as the reference pipeline computes it.
    let c =
        ((size as f64 / (size + CROP_PADDING) as f64) * short).round_ties_even().max(1.0) as usize;
    // Python's (w - c + 1) // 2: the extra pixel of an odd margin goes to the left/top.
    let left = (img.width - c).div_ceil(2);
    let top = (img.height - c).div_ceil(2);
    resize_bicubic(&img.crop(left, top, c, c), size, size)
}

/// JPEG-encode pixels at `quality` (1-100): the upload a plain app would make of the model input.
///
/// # Errors
/// [`Error::ImageDecode`] if the encoder fails.
pub fn encode_jpeg(img: &RgbImage, quality: u8) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    ::image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality.clamp(1, 100))
        .encode(&img.pixels, img.width as u32, img.height as u32, ::image::ExtendedColorType::Rgb8)
        .map_err(|e| Error::ImageDecode(format!("JPEG encoding failed: {e}")))?;
    Ok(out)
}

/// Decode and preprocess image bytes to the `224x224` HWC pixels the network takes.
///
/// # Errors
/// As [`decode`].
pub fn preprocess(bytes: &[u8]) -> Result<RgbImage> {
    Ok(center_crop_resize(&decode(bytes)?, INPUT_SIZE))
}

/// Normalize HWC pixels to the network input, `(x - 127) / 128`, as a CHW f32 vector.
pub fn normalize(img: &RgbImage) -> Vec<f32> {
    let plane = img.width * img.height;
    let mut out = vec![0.0f32; plane * 3];
    for (i, px) in img.pixels.chunks_exact(3).enumerate() {
        for c in 0..3 {
            out[c * plane + i] = (f32::from(px[c]) - 127.0) / 128.0;
        }
    }
    out
}

#[cfg(feature = "model")]
/// The input tensor for one preprocessed image.
///
/// # Shapes
/// Returns `[1, 3, H, W]`.
pub fn to_input_tensor(img: &RgbImage, device: &Device) -> Tensor<4> {
    Tensor::from_data(TensorData::new(normalize(img), [1, 3, img.height, img.width]), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_matches_python_offsets() {
        // 451x300 (chelsea): c = round(0.875 * 300) = 262, left = (451 - 262 + 1) // 2 = 95.
        let img =
            RgbImage::new(451, 300, (0..451 * 300 * 3).map(|i| (i % 251) as u8).collect()).unwrap();
        let out = center_crop_resize(&img, 224);
        assert_eq!((out.width, out.height), (224, 224));
    }

    #[test]
    fn normalize_is_channel_planar() {
        let img = RgbImage::new(2, 1, vec![127, 255, 0, 127, 255, 0]).unwrap();
        assert_eq!(normalize(&img), vec![0.0, 0.0, 1.0, 1.0, -127.0 / 128.0, -127.0 / 128.0]);
    }

    /// `jpeg` with an EXIF segment that holds only an orientation (1-8), right after its SOI:
    /// a little-endian TIFF header and one IFD entry, tag 0x0112, one SHORT.
    fn with_exif_orientation(jpeg: &[u8], orientation: u8) -> Vec<u8> {
        let mut payload = b"Exif\0\0II*\0\x08\0\0\0\x01\0\x12\x01\x03\0\x01\0\0\0".to_vec();
        payload.extend_from_slice(&[orientation, 0, 0, 0, 0, 0, 0, 0]);
        let len = (payload.len() + 2) as u16;
        let mut out = jpeg[..2].to_vec();
        out.extend_from_slice(&[0xff, 0xe1]);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&payload);
        out.extend_from_slice(&jpeg[2..]);
        out
    }

    #[test]
    fn exif_orientation_turns_a_photo_upright() {
        let upright = decode(include_bytes!("../../../web/samples/chelsea.png")).unwrap();
        // Stored as a phone stores a portrait: a quarter turn counter-clockwise, with EXIF 6
        // ("turn 90° clockwise to view").
        let buffer = ::image::RgbImage::from_raw(
            upright.width as u32,
            upright.height as u32,
            upright.pixels.clone(),
        )
        .unwrap();
        let stored = ::image::imageops::rotate270(&buffer);
        let (w, h) = stored.dimensions();
        let stored = RgbImage::new(w as usize, h as usize, stored.into_raw()).unwrap();
        let jpeg = encode_jpeg(&stored, 95).unwrap();
        let sideways = decode(&jpeg).unwrap();
        assert_eq!((sideways.width, sideways.height), (upright.height, upright.width));
        let turned = decode(&with_exif_orientation(&jpeg, 6)).unwrap();
        assert_eq!((turned.width, turned.height), (upright.width, upright.height));
        let diff: f64 = turned
            .pixels
            .iter()
            .zip(&upright.pixels)
            .map(|(a, b)| f64::from(a.abs_diff(*b)))
            .sum::<f64>()
            / upright.pixels.len() as f64;
        assert!(diff < 3.0, "upright after EXIF: mean difference {diff} (JPEG q95 alone)");
        // Orientation 1 changes nothing.
        assert_eq!(decode(&with_exif_orientation(&jpeg, 1)).unwrap(), sideways);
    }

    #[test]
    fn exif_orientation_reads_either_byte_order_and_nothing_malformed() {
        // One directory at offset 8 with two entries: another tag first, then the orientation.
        let little =
            b"II*\0\x08\0\0\0\x02\0\x0f\x01\x02\0\x04\0\0\0Foo\0\x12\x01\x03\0\x01\0\0\0\x08\0\0\0";
        assert_eq!(exif_orientation(little), Some(8));
        let big = b"MM\0*\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x03\0\0";
        assert_eq!(exif_orientation(big), Some(3));
        // Cut inside the entry, a LONG instead of a SHORT, a directory past the end, no header.
        assert_eq!(exif_orientation(&little[..little.len() - 5]), None);
        let mut long = big.to_vec();
        long[13] = 4;
        assert_eq!(exif_orientation(&long), None);
        assert_eq!(exif_orientation(b"MM\0*\xff\xff\xff\xf0"), None);
        assert_eq!(exif_orientation(b"Exif"), None);
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(matches!(decode(b"definitely not an image"), Err(Error::ImageDecode(_))));
        assert!(matches!(decode(&[0xff, 0xd8, 0xff, 0xe0, 0, 0]), Err(Error::ImageDecode(_))));
    }

    #[test]
    fn large_jpegs_decode_at_a_reduced_scale_to_the_same_input() {
        // A smooth 2400x1600 scene: decoded at 1/2 scale (short side 800 >= 512, 400 is not).
        let (w, h) = (2400, 1600);
        let pixels = (0..w * h)
            .flat_map(|i| {
                let (x, y) = ((i % w) as f32, (i / w) as f32);
                [(x / 10.0).sin() * 100.0 + 128.0, y / 7.0, (x + y) / 16.0].map(|v| v as u8)
            })
            .collect();
        let img = RgbImage::new(w, h, pixels).unwrap();
        let jpeg = encode_jpeg(&img, 92).unwrap();
        let decoded = decode(&jpeg).unwrap();
        assert_eq!((decoded.width, decoded.height), (1200, 800));
        // The network's input differs little from the one a full-size decode would give.
        let full = center_crop_resize(&img, INPUT_SIZE);
        let scaled = preprocess(&jpeg).unwrap();
        let diff: f64 =
            full.pixels.iter().zip(&scaled.pixels).map(|(a, b)| f64::from(a.abs_diff(*b))).sum();
        let mean = diff / full.pixels.len() as f64;
        assert!(mean < 3.0, "mean difference {mean} grey levels");
    }

    #[test]
    fn truncated_jpegs_are_refused_whole_ones_decode() {
        let pixels = (0..64 * 48 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let img = RgbImage::new(64, 48, pixels).unwrap();
        let jpeg = encode_jpeg(&img, 90).unwrap();
        let back = decode(&jpeg).unwrap();
        assert_eq!((back.width, back.height), (64, 48));
        for cut in [jpeg.len() / 2, jpeg.len() - 2] {
            let err = decode(&jpeg[..cut]).unwrap_err().to_string();
            assert!(err.contains("truncated"), "cut at {cut}: {err}");
        }
    }
}
