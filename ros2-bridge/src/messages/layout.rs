//! Element types and shapes of bulk data, read from a message's own fields:
//! images (encoding, size, step), point clouds (fields), multi-arrays (layout).

use super::*;

/// Element type and shape of an image's data, from its encoding, size and
/// step (`sensor_msgs/image_encodings.hpp`). Unknown encodings, and rows
/// with padding, give `|u1` of `[height, step]`.
pub fn image_layout(
    encoding: &str,
    height: usize,
    width: usize,
    step: usize,
    bigendian: bool,
    nbytes: usize,
) -> (Dtype, Vec<usize>) {
    let order = if bigendian { '>' } else { '<' };
    let known = image_pixel(encoding).and_then(|(kind, size, channels)| {
        let dtype = Dtype::parse(&if size == 1 { format!("|{kind}1") } else { format!("{order}{kind}{size}") }).ok()?;
        (step == width * channels * size && nbytes == height * step).then(|| {
            let shape = if channels == 1 { vec![height, width] } else { vec![height, width, channels] };
            (dtype, shape)
        })
    });
    known.unwrap_or_else(|| {
        if height > 0 && nbytes == height * step {
            (Dtype::U8, vec![height, step])
        } else {
            (Dtype::U8, vec![nbytes])
        }
    })
}

/// (numpy kind, item size, channels) of an image encoding.
pub(super) fn image_pixel(encoding: &str) -> Option<(char, usize, usize)> {
    let fixed = match encoding {
        "mono8" => ('u', 1, 1),
        "mono16" => ('u', 2, 1),
        "rgb8" | "bgr8" => ('u', 1, 3),
        "rgba8" | "bgra8" => ('u', 1, 4),
        "rgb16" | "bgr16" => ('u', 2, 3),
        "rgba16" | "bgra16" => ('u', 2, 4),
        "yuv422" | "uyvy" | "yuyv" | "yuv422_yuy2" => ('u', 1, 2),
        e if e.starts_with("bayer_") && e.ends_with('8') => ('u', 1, 1),
        e if e.starts_with("bayer_") && e.ends_with("16") => ('u', 2, 1),
        e => {
            // "32FC3": bits, kind (U, S, F), "C", channels (1-4 or none).
            let (bits, rest) = e.split_at(e.find(|c: char| !c.is_ascii_digit())?);
            let mut chars = rest.chars();
            let kind = match chars.next()? {
                'U' => 'u',
                'S' => 'i',
                'F' => 'f',
                _ => return None,
            };
            let rest: String = chars.collect();
            let channels = if rest.is_empty() { 1 } else { rest.strip_prefix('C')?.parse().ok()? };
            let size = bits.parse::<usize>().ok()? / 8;
            if !(1..=8).contains(&size) || (kind == 'f' && size < 4) || channels == 0 {
                return None;
            }
            (kind, size, channels)
        }
    };
    Some(fixed)
}

/// The encoding of an image array: channels from its third dimension.
pub(super) fn image_encoding(dtype: &Dtype, shape: &[usize]) -> Option<String> {
    let channels = match shape.len() {
        2 => 1,
        3 => shape[2],
        _ => return None,
    };
    let text = dtype.as_str();
    let kind = text.chars().nth(1)?;
    let size = dtype.itemsize();
    Some(match (kind, size, channels) {
        ('u', 1, 1) => "mono8".into(),
        ('u', 1, 3) => "rgb8".into(),
        ('u', 1, 4) => "rgba8".into(),
        ('u', 2, 1) => "mono16".into(),
        ('u', 2, 3) => "rgb16".into(),
        ('u', 2, 4) => "rgba16".into(),
        ('u', s, c) => format!("{}UC{c}", s * 8),
        ('i', s, c) => format!("{}SC{c}", s * 8),
        ('f', s, c) => format!("{}FC{c}", s * 8),
        _ => return None,
    })
}

/// PointField datatype codes -> (numpy kind, size).
pub(super) fn point_field(datatype: u8) -> Option<(char, usize)> {
    Some(match datatype {
        1 => ('i', 1),
        2 => ('u', 1),
        3 => ('i', 2),
        4 => ('u', 2),
        5 => ('i', 4),
        6 => ('u', 4),
        7 => ('f', 4),
        8 => ('f', 8),
        _ => return None,
    })
}

/// Element type and shape of a point cloud's `nbytes` of data (`c.data`
/// itself is not read): `[height, width, point_step / size]` of the
/// fields' type when every field has the same type and sits on its own
/// element (x, y, z, padding: the usual clouds), else `|u1` of `[height,
/// row_step]`.
pub fn cloud_layout(c: &r2r::sensor_msgs::msg::PointCloud2, nbytes: usize) -> (Dtype, Vec<usize>) {
    let (h, w, ps, rs, n) = (c.height as usize, c.width as usize, c.point_step as usize, c.row_step as usize, nbytes);
    let order = if c.is_bigendian { '>' } else { '<' };
    let common = c.fields.first().and_then(|f| point_field(f.datatype)).filter(|&(kind, size)| {
        c.fields.iter().all(|f| {
            point_field(f.datatype) == Some((kind, size)) && (f.offset as usize).is_multiple_of(size) && f.count <= 1
        }) && ps.is_multiple_of(size)
            && ps > 0
    });
    if let Some((kind, size)) = common {
        if rs == w * ps && n == h * rs {
            let text = if size == 1 { format!("|{kind}1") } else { format!("{order}{kind}{size}") };
            if let Ok(dtype) = Dtype::parse(&text) {
                return (dtype, vec![h, w, ps / size]);
            }
        }
    }
    if h > 0 && n == h * rs {
        (Dtype::U8, vec![h, rs])
    } else {
        (Dtype::U8, vec![n])
    }
}

/// A multi-array's shape from its layout, when the layout describes all
/// of the data (no offset); else one dimension.
pub fn multiarray_shape(layout: &r2r::std_msgs::msg::MultiArrayLayout, len: usize) -> Vec<usize> {
    let dims: Vec<usize> = layout.dim.iter().map(|d| d.size as usize).collect();
    if !dims.is_empty() && layout.data_offset == 0 && dims.iter().product::<usize>() == len {
        dims
    } else {
        vec![len]
    }
}
