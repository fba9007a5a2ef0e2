//! The calibration artefact: per boundary, clip ranges and symbol distributions for every bit
//! depth, and optionally a learned projection with its own tables. `./run.sh calibrate`
//! writes it from a folder of images; the server loads it and serves the same bytes to browsers,
//! and every coded frame names the file it was coded with (its checksum) so a stale copy is
//! detected instead of decoded into garbage.
//!
//! Stored in a [`crate::container::TensorFile`] under the magic "SPLC":
//!
//! ```text
//! meta                  [3]         version, calibration images, entropy precision
//! <b>.raw.q<bits>.lo    [C]         clip range per channel
//! <b>.raw.q<bits>.hi    [C]
//! <b>.raw.q<bits>.prob  [C, 2^bits] fixed-point probabilities (stored as u16)
//! <b>.pca.mean          [C]         projection: y = basisᵀ (x - mean)
//! <b>.pca.basis         [C, R]
//! <b>.pca.q<bits>.lo|hi|prob        as above, per component (R of them)
//! <b>.alloc.center      [C]         `s<level>` settings: mean per channel,
//! <b>.alloc.spread      [C]         standard deviation per channel,
//! <b>.alloc.weight      [C]         KL of the answer per unit noise variance on the channel
//! <b>.learned.layer<i>.w [in, out]  `learned<bits>` settings: the trained coder's dense
//! <b>.learned.layer<i>.b [out]      layers, encoder first ([`LearnedCoder`]),
//! <b>.learned.encoder   [1]         how many of them are the encoder's,
//! <b>.learned.command   text        the command line that trained it,
//! <b>.learned.q<bits>.lo|hi|prob    tables over the codes, as above
//! sensitivity_images    [1]         optional: images the `alloc.weight`s were measured on
//! part_of               [4]         a part only: the whole file's id, 16 bits per value
//! ```
//!
//! `<b>` is a boundary's name in the model's spec ([`ModelSpec`]): the tables know no model, and
//! [`Calibration::check_spec`] holds them to the one that hosts them (each boundary one of its
//! own, with its channels).
//!
//! A browser that codes features at one boundary needs that boundary's tables only (block5's
//! are 3% of the file): [`Calibration::part`] cuts them out with the whole file's id, so frames
//! coded with a part name the calibration the server holds, and [`Calibration::merge`] adds
//! another boundary's part later.

use std::collections::BTreeMap;

use super::CodecError;
use super::alloc::AllocTable;
use super::entropy::{self, Model, PRECISION};
use super::learned::{Dense, LearnedCoder};
use super::quant::{ClipRange, Projection};
use super::setting::{AllocSetting, QuantSetting, SUPPORTED_BITS, Setting};
use crate::container::TensorFile;
use crate::runtime::ModelSpec;

/// First four bytes of a calibration file.
pub const CALIBRATION_MAGIC: [u8; 4] = *b"SPLC";
/// Layout version of the tables (inside the container's own version).
pub const CALIBRATION_VERSION: u32 = 2;

/// Clip ranges and entropy models for one bit depth over some channels (or components).
#[derive(Clone, Debug)]
pub struct QuantTable {
    bits: u8,
    ranges: Vec<ClipRange>,
    probabilities: Vec<u32>,
    models: Vec<Model>,
}

impl QuantTable {
    /// A table from clip ranges and per-channel symbol counts (`counts[c][symbol]`).
    ///
    /// # Errors
    /// When the lengths disagree with `bits`.
    pub fn from_counts(
        bits: u8,
        ranges: Vec<ClipRange>,
        counts: &[Vec<u64>],
    ) -> Result<Self, CodecError> {
        let probabilities: Vec<u32> = counts.iter().flat_map(|c| entropy::fixed_point(c)).collect();
        Self::new(bits, ranges, probabilities)
    }

    fn new(bits: u8, ranges: Vec<ClipRange>, probabilities: Vec<u32>) -> Result<Self, CodecError> {
        let levels = 1usize << bits;
        if probabilities.len() != ranges.len() * levels {
            return Err(CodecError::BadCalibration(format!(
                "{} probabilities for {} channels at {bits} bits",
                probabilities.len(),
                ranges.len()
            )));
        }
        let models =
            probabilities.chunks_exact(levels).map(entropy::model).collect::<Result<_, _>>()?;
        Ok(Self { bits, ranges, probabilities, models })
    }

    /// Clip range per channel.
    pub fn ranges(&self) -> &[ClipRange] {
        &self.ranges
    }

    /// Entropy model per channel.
    pub fn models(&self) -> &[Model] {
        &self.models
    }

    /// Ideal bits per value under this table's own distributions (the calibration set's entropy).
    pub fn entropy_bits(&self) -> f64 {
        let levels = 1usize << self.bits;
        let total = (1u64 << PRECISION) as f64;
        let h: f64 = self
            .probabilities
            .chunks_exact(levels)
            .map(|p| {
                p.iter()
                    .map(|p| {
                        let q = f64::from(*p) / total;
                        -q * q.log2()
                    })
                    .sum::<f64>()
            })
            .sum();
        h / self.ranges.len().max(1) as f64
    }
}

/// A projection and its per-bit-depth tables over the components.
#[derive(Clone, Debug)]
pub struct PcaTables {
    /// The map itself.
    pub projection: Projection,
    /// Tables over the components, by bit depth.
    pub tables: BTreeMap<u8, QuantTable>,
}

/// A trained bottleneck and its per-bit-depth tables over the codes.
#[derive(Clone, Debug)]
pub struct LearnedTables {
    /// The encoder and the decoder.
    pub coder: LearnedCoder,
    /// Tables over the codes, by bit depth.
    pub tables: BTreeMap<u8, QuantTable>,
    /// The command line that trained it.
    pub command: String,
}

/// Everything calibrated at one boundary.
#[derive(Clone, Debug, Default)]
pub struct BoundaryTables {
    /// Tables over the raw channels, by bit depth.
    pub raw: BTreeMap<u8, QuantTable>,
    /// The projection, when one was learned.
    pub pca: Option<PcaTables>,
    /// Per-channel statistics and sensitivities for the `s<level>` settings.
    pub alloc: Option<AllocTable>,
    /// The trained bottleneck of the `learned<bits>` settings, when one was trained here.
    pub learned: Option<LearnedTables>,
}

impl BoundaryTables {
    /// The channels each table covers, when they agree (`None` without tables, or when two
    /// tables disagree: a file that does is refused at load).
    pub fn channels(&self) -> Option<usize> {
        let mut counts = self
            .raw
            .values()
            .map(|t| t.ranges.len())
            .chain(self.pca.as_ref().map(|p| p.projection.channels()))
            .chain(self.alloc.as_ref().map(AllocTable::channels))
            .chain(self.learned.as_ref().map(|l| l.coder.channels()));
        let first = counts.next()?;
        counts.all(|c| c == first).then_some(first)
    }
}

/// A loaded calibration file.
#[derive(Clone, Debug)]
pub struct Calibration {
    id: u64,
    images: u32,
    sensitivity_images: u32,
    /// By boundary name, in the order written (a model's forward order when calibrated).
    boundaries: Vec<(String, BoundaryTables)>,
}

fn clip_ranges(lo: &[f32], hi: &[f32]) -> Vec<ClipRange> {
    lo.iter().zip(hi).map(|(lo, hi)| ClipRange { lo: *lo, hi: *hi }).collect()
}

impl Calibration {
    /// Assemble a calibration (what `./run.sh calibrate` does before writing it) from tables
    /// by boundary name, in the order given; a name given twice keeps its last tables.
    pub fn new(
        images: u32,
        boundaries: impl IntoIterator<Item = (impl Into<String>, BoundaryTables)>,
    ) -> Self {
        let mut c = Self { id: 0, images, sensitivity_images: 0, boundaries: Vec::new() };
        for (name, tables) in boundaries {
            c.insert(name.into(), tables);
        }
        c.id = Self::checksum(&c.to_bytes());
        c
    }

    fn insert(&mut self, name: String, tables: BoundaryTables) {
        *self.entry(&name) = tables;
    }

    /// Check that these tables are for the model `spec` describes: each boundary they cover is
    /// one of its boundaries, and has there the channels (the first dimension of an item)
    /// the tables cover.
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] naming the first boundary that is not.
    pub fn check_spec(&self, spec: &ModelSpec) -> Result<(), CodecError> {
        for (name, tables) in &self.boundaries {
            let b = spec.index_of(name).and_then(|i| spec.boundary(i)).map_err(|_| {
                CodecError::BadCalibration(format!(
                    "it has tables at {name}, which {} does not have",
                    spec.name
                ))
            })?;
            let channels = b.shape.first().copied().unwrap_or(1);
            if tables.channels() != Some(channels) {
                return Err(CodecError::BadCalibration(format!(
                    "its tables at {name} cover {:?} channels; {} has {channels} there",
                    tables.channels(),
                    spec.name
                )));
            }
        }
        Ok(())
    }

    /// The same tables, recording that the channel sensitivities were measured on `n` images
    /// (a new id: the file changes).
    #[must_use]
    pub fn with_sensitivity_images(mut self, n: u32) -> Self {
        self.sensitivity_images = n;
        self.id = Self::checksum(&self.to_bytes());
        self
    }

    fn checksum(bytes: &[u8]) -> u64 {
        u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().expect("8 bytes"))
    }

    /// Identity of this file on the wire: the container's checksum.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// How many images it was computed from.
    pub fn images(&self) -> u32 {
        self.images
    }

    /// How many images the channel sensitivities (the `s<level>` settings) were measured on;
    /// 0 when the file does not say (written before it recorded this) or none were measured.
    pub fn sensitivity_images(&self) -> u32 {
        self.sensitivity_images
    }

    /// The names of the boundaries with tables, in the file's order.
    pub fn boundaries(&self) -> impl Iterator<Item = &str> + '_ {
        self.boundaries.iter().map(|(n, _)| n.as_str())
    }

    /// The tables at the boundary named `boundary`.
    pub fn at(&self, boundary: &str) -> Option<&BoundaryTables> {
        self.boundaries.iter().find(|(n, _)| n == boundary).map(|(_, t)| t)
    }

    /// The table and projection a setting uses at `boundary`.
    ///
    /// # Errors
    /// [`CodecError::NotCalibrated`] or [`CodecError::RankTooLarge`].
    pub fn lookup(
        &self,
        boundary: &str,
        setting: QuantSetting,
    ) -> Result<(&QuantTable, Option<&Projection>), CodecError> {
        let missing = || CodecError::NotCalibrated {
            boundary: boundary.to_string(),
            setting: super::Setting::Quant(setting).to_string(),
        };
        let b = self.at(boundary).ok_or_else(missing)?;
        if setting.rank == 0 {
            return Ok((b.raw.get(&setting.bits).ok_or_else(missing)?, None));
        }
        let pca = b.pca.as_ref().ok_or_else(missing)?;
        if usize::from(setting.rank) > pca.projection.max_rank {
            return Err(CodecError::RankTooLarge {
                boundary: boundary.to_string(),
                rank: setting.rank,
                max: pca.projection.max_rank,
            });
        }
        Ok((pca.tables.get(&setting.bits).ok_or_else(missing)?, Some(&pca.projection)))
    }

    /// The allocation table an `s<level>` setting uses at `boundary`.
    ///
    /// # Errors
    /// [`CodecError::NotCalibrated`] when the calibration measured no sensitivities there.
    pub fn lookup_alloc(
        &self,
        boundary: &str,
        setting: AllocSetting,
    ) -> Result<&AllocTable, CodecError> {
        self.at(boundary).and_then(|b| b.alloc.as_ref()).ok_or_else(|| CodecError::NotCalibrated {
            boundary: boundary.to_string(),
            setting: super::Setting::Alloc(setting).to_string(),
        })
    }

    /// The trained coder and the table over its codes a `learned<bits>` setting uses at
    /// `boundary`.
    ///
    /// # Errors
    /// [`CodecError::NotCalibrated`] when no bottleneck was trained there, or none for `bits`.
    pub fn lookup_learned(
        &self,
        boundary: &str,
        bits: u8,
    ) -> Result<(&LearnedCoder, &QuantTable), CodecError> {
        self.at(boundary)
            .and_then(|b| b.learned.as_ref())
            .and_then(|l| Some((&l.coder, l.tables.get(&bits)?)))
            .ok_or_else(|| CodecError::NotCalibrated {
                boundary: boundary.to_string(),
                setting: Setting::Learned(bits).to_string(),
            })
    }

    /// Whether frames under `setting` at `boundary` can be coded with these tables (settings that
    /// need none always can).
    pub fn codes(&self, boundary: &str, setting: Setting) -> bool {
        match setting {
            Setting::F32 | Setting::Ranged(_) => true,
            Setting::Quant(q) => q.check().is_ok() && self.lookup(boundary, q).is_ok(),
            Setting::Alloc(a) => a.check().is_ok() && self.lookup_alloc(boundary, a).is_ok(),
            Setting::Learned(bits) => self.lookup_learned(boundary, bits).is_ok(),
        }
    }

    /// The same calibration with `learned` as the trained bottleneck at `boundary` (a new id:
    /// the file changes).
    #[must_use]
    pub fn with_learned(mut self, boundary: &str, learned: LearnedTables) -> Self {
        self.entry(boundary).learned = Some(learned);
        self.id = Self::checksum(&self.to_bytes());
        self
    }

    /// Serialize (deterministically: same tables, same bytes, same id).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.write(|_| true, None)
    }

    /// The tables at `boundary` alone, as a file that loads as this calibration (same id)
    /// restricted to that boundary; `None` when the boundary has no tables.
    pub fn part(&self, boundary: &str) -> Option<Vec<u8>> {
        self.at(boundary).map(|_| self.write(|b| b == boundary, Some(self.id)))
    }

    /// Add the boundaries of `other`, a part of the same calibration.
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] when `other` belongs to another calibration.
    pub fn merge(&mut self, other: Calibration) -> Result<(), CodecError> {
        if other.id != self.id {
            return Err(CodecError::BadCalibration(format!(
                "a part of calibration {:016x} cannot join {:016x}",
                other.id, self.id
            )));
        }
        for (name, tables) in other.boundaries {
            self.insert(name, tables);
        }
        Ok(())
    }

    fn write(&self, keep: impl Fn(&str) -> bool, part_of: Option<u64>) -> Vec<u8> {
        let mut f = TensorFile::new();
        f.insert(
            "meta",
            vec![3],
            vec![CALIBRATION_VERSION as f32, self.images as f32, PRECISION as f32],
        );
        let put_table = |f: &mut TensorFile, prefix: &str, t: &QuantTable| {
            let c = t.ranges.len();
            f.insert(format!("{prefix}.lo"), vec![c], t.ranges.iter().map(|r| r.lo).collect());
            f.insert(format!("{prefix}.hi"), vec![c], t.ranges.iter().map(|r| r.hi).collect());
            // Every probability is below 2^16 (each of at least 4 symbols has at least 1 of
            // 2^PRECISION): two bytes each, half the file.
            let probabilities: Vec<u16> =
                t.probabilities.iter().map(|p| u16::try_from(*p).expect("below 2^16")).collect();
            f.insert_u16(format!("{prefix}.prob"), vec![c, 1 << t.bits], &probabilities);
        };
        if self.sensitivity_images > 0 {
            f.insert("sensitivity_images", vec![1], vec![self.sensitivity_images as f32]);
        }
        if let Some(id) = part_of {
            let pieces = (0..4).map(|i| ((id >> (16 * i)) & 0xffff) as f32).collect();
            f.insert("part_of", vec![4], pieces);
        }
        for (boundary, b) in self.boundaries.iter().filter(|(b, _)| keep(b)) {
            for (bits, t) in &b.raw {
                put_table(&mut f, &format!("{boundary}.raw.q{bits}"), t);
            }
            if let Some(pca) = &b.pca {
                let p = &pca.projection;
                f.insert(format!("{boundary}.pca.mean"), vec![p.channels()], p.mean.clone());
                f.insert(
                    format!("{boundary}.pca.basis"),
                    vec![p.channels(), p.max_rank],
                    p.basis.clone(),
                );
                for (bits, t) in &pca.tables {
                    put_table(&mut f, &format!("{boundary}.pca.q{bits}"), t);
                }
            }
            if let Some(a) = &b.alloc {
                let c = a.channels();
                f.insert(format!("{boundary}.alloc.center"), vec![c], a.center().to_vec());
                f.insert(format!("{boundary}.alloc.spread"), vec![c], a.spread().to_vec());
                f.insert(format!("{boundary}.alloc.weight"), vec![c], a.weight().to_vec());
            }
            if let Some(l) = &b.learned {
                for (i, layer) in l.coder.layers().iter().enumerate() {
                    let (inputs, outputs) = (layer.inputs(), layer.outputs());
                    let name = format!("{boundary}.learned.layer{i}");
                    f.insert(format!("{name}.w"), vec![inputs, outputs], layer.w.clone());
                    f.insert(format!("{name}.b"), vec![outputs], layer.b.clone());
                }
                let encoder = l.coder.encoder_layers() as f32;
                f.insert(format!("{boundary}.learned.encoder"), vec![1], vec![encoder]);
                if !l.command.is_empty() {
                    f.insert_text(format!("{boundary}.learned.command"), &l.command);
                }
                for (bits, t) in &l.tables {
                    put_table(&mut f, &format!("{boundary}.learned.q{bits}"), t);
                }
            }
        }
        f.to_bytes(CALIBRATION_MAGIC)
    }

    /// Parse and check a calibration file.
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] naming the first problem.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, CodecError> {
        let bad = |m: String| CodecError::BadCalibration(m);
        let f = TensorFile::from_bytes(bytes, CALIBRATION_MAGIC).map_err(|e| bad(e.to_string()))?;
        let meta = f.tensor("meta", &[3]).map_err(|e| bad(e.to_string()))?;
        if meta[0] != CALIBRATION_VERSION as f32 || meta[2] != PRECISION as f32 {
            return Err(bad(format!(
                "table version {} / precision {}, this build reads {CALIBRATION_VERSION} / {PRECISION}; re-run `./run.sh calibrate`",
                meta[0], meta[2]
            )));
        }
        let id = match f.tensor("part_of", &[4]) {
            Ok(p) if p.iter().all(|v| v.fract() == 0.0 && (0.0..65536.0).contains(v)) => {
                p.iter().rev().fold(0u64, |id, v| (id << 16) | *v as u64)
            }
            Ok(_) => return Err(bad("part_of is not a calibration id".into())),
            Err(crate::container::ContainerError::Missing(_)) => Self::checksum(bytes),
            Err(e) => return Err(bad(e.to_string())),
        };
        let sensitivity_images = match f.tensor("sensitivity_images", &[1]) {
            Ok(n) if n[0].fract() == 0.0 && n[0] >= 0.0 => n[0] as u32,
            Ok(_) => return Err(bad("sensitivity_images is not a count".into())),
            Err(crate::container::ContainerError::Missing(_)) => 0,
            Err(e) => return Err(bad(e.to_string())),
        };
        let mut c = Self { id, images: meta[1] as u32, sensitivity_images, boundaries: vec![] };
        // The channels at a boundary are what its tables were written with; `check_spec`
        // holds them to the model's.
        let dims_of = |name: &str| f.iter().find(|(n, _, _)| *n == name).map(|(_, d, _)| d);
        for (name, dims, _) in f.iter() {
            if let Some(b) = name.strip_suffix(".alloc.weight") {
                check_boundary_name(b, name)?;
                let channels = [dims.first().copied().unwrap_or(0)];
                let get = |what: &str| {
                    f.tensor(&format!("{b}.alloc.{what}"), &channels)
                        .map(<[f32]>::to_vec)
                        .map_err(|e| bad(e.to_string()))
                };
                let table = AllocTable::new(get("center")?, get("spread")?, get("weight")?)?;
                c.entry(b).alloc = Some(table);
                continue;
            }
            let Some(prefix) = name.strip_suffix(".prob") else { continue };
            let mut parts = prefix.split('.');
            let (Some(b), Some(kind), Some(q), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad(format!("unexpected tensor {name}")));
            };
            check_boundary_name(b, name)?;
            let bits: u8 = q
                .strip_prefix('q')
                .and_then(|q| q.parse().ok())
                .filter(|b| SUPPORTED_BITS.contains(b))
                .ok_or_else(|| bad(format!("unsupported bit depth in {name}")))?;
            let count = match (kind, dims) {
                (_, [count, levels]) if *levels == 1 << bits => *count,
                ("raw" | "pca" | "learned", _) => {
                    return Err(bad(format!("{name} is not [count, {}]", 1 << bits)));
                }
                _ => return Err(bad(format!("unexpected tensor {name}"))),
            };
            let get = |suffix: &str, dims: &[usize]| {
                f.tensor(&format!("{prefix}.{suffix}"), dims).map_err(|e| bad(e.to_string()))
            };
            let ranges = clip_ranges(get("lo", &[count])?, get("hi", &[count])?);
            let probs = get("prob", &[count, 1 << bits])?;
            if probs.iter().any(|p| p.fract() != 0.0 || *p < 1.0 || *p > (1u32 << PRECISION) as f32)
            {
                return Err(bad(format!("{name} holds non-integer probabilities")));
            }
            let table = QuantTable::new(bits, ranges, probs.iter().map(|p| *p as u32).collect())?;
            if kind == "raw" {
                c.entry(b).raw.insert(bits, table);
                continue;
            }
            if kind == "learned" {
                let entry = c.entry(b);
                if entry.learned.is_none() {
                    entry.learned = Some(read_learned(&f, b)?);
                }
                let learned = entry.learned.as_mut().expect("just set");
                if learned.coder.codes() != count {
                    return Err(bad(format!(
                        "{name} covers {count} codes; the coder at {b} makes {}",
                        learned.coder.codes()
                    )));
                }
                learned.tables.insert(bits, table);
                continue;
            }
            if kind != "pca" {
                return Err(bad(format!("unexpected tensor {name}")));
            }
            let basis_name = format!("{b}.pca.basis");
            let channels = match dims_of(&basis_name) {
                Some([channels, rank]) if *rank == count => *channels,
                Some(_) => return Err(bad(format!("{basis_name} is not [channels, {count}]"))),
                None => return Err(bad(format!("{name} without {basis_name}"))),
            };
            let entry = c.entry(b);
            if entry.pca.is_none() {
                let mean = get_pca(&f, b, "mean", &[channels])?;
                let basis = get_pca(&f, b, "basis", &[channels, count])?;
                entry.pca = Some(PcaTables {
                    projection: Projection { mean, basis, max_rank: count },
                    tables: BTreeMap::new(),
                });
            }
            entry.pca.as_mut().expect("just set").tables.insert(bits, table);
        }
        if c.boundaries.is_empty() {
            return Err(bad("no boundary has tables".into()));
        }
        if let Some((name, _)) = c.boundaries.iter().find(|(_, t)| t.channels().is_none()) {
            return Err(bad(format!("the tables at {name} cover different channel counts")));
        }
        Ok(c)
    }

    /// The tables at `name`, made empty when it has none yet.
    fn entry(&mut self, name: &str) -> &mut BoundaryTables {
        let i = match self.boundaries.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.boundaries.push((name.to_string(), BoundaryTables::default()));
                self.boundaries.len() - 1
            }
        };
        &mut self.boundaries[i].1
    }
}

/// A boundary name as tensor names hold it: not empty, no dot (the names' separator).
fn check_boundary_name(b: &str, tensor: &str) -> Result<(), CodecError> {
    if b.is_empty() || b.contains('.') {
        return Err(CodecError::BadCalibration(format!("no boundary name in {tensor}")));
    }
    Ok(())
}

/// The trained coder at boundary `b` (its tables are read with the others).
fn read_learned(f: &TensorFile, b: &str) -> Result<LearnedTables, CodecError> {
    let bad = |m: String| CodecError::BadCalibration(m);
    let encoder =
        f.tensor(&format!("{b}.learned.encoder"), &[1]).map_err(|e| bad(e.to_string()))?[0];
    if encoder.fract() != 0.0 || !(1.0..super::learned::MAX_LAYERS as f32).contains(&encoder) {
        return Err(bad(format!("{b}.learned.encoder is not a layer count")));
    }
    let mut layers = Vec::new();
    loop {
        let name = format!("{b}.learned.layer{}", layers.len());
        let Some((_, dims, _)) = f.iter().find(|(n, _, _)| *n == format!("{name}.w")) else {
            break;
        };
        let [inputs, outputs] = *dims else {
            return Err(bad(format!("{name}.w is not [inputs, outputs]")));
        };
        let get = |what: &str, dims: &[usize]| {
            f.tensor(&format!("{name}.{what}"), dims)
                .map(<[f32]>::to_vec)
                .map_err(|e| bad(e.to_string()))
        };
        layers.push(Dense { w: get("w", &[inputs, outputs])?, b: get("b", &[outputs])? });
        if layers.len() > super::learned::MAX_LAYERS {
            return Err(bad(format!(
                "{b}.learned has more than {} layers",
                super::learned::MAX_LAYERS
            )));
        }
    }
    let coder = LearnedCoder::new(layers, encoder as usize)?;
    let command = match f.text(&format!("{b}.learned.command")) {
        Ok(text) => text,
        Err(crate::container::ContainerError::Missing(_)) => String::new(),
        Err(e) => return Err(bad(e.to_string())),
    };
    Ok(LearnedTables { coder, tables: BTreeMap::new(), command })
}

fn get_pca(f: &TensorFile, b: &str, what: &str, dims: &[usize]) -> Result<Vec<f32>, CodecError> {
    f.tensor(&format!("{b}.pca.{what}"), dims)
        .map(<[f32]>::to_vec)
        .map_err(|e| CodecError::BadCalibration(e.to_string()))
}

impl Calibration {
    /// Read and check a calibration file (native tools and the server; the browser fetches the
    /// bytes the server serves).
    ///
    /// # Errors
    /// [`CodecError::BadCalibration`] when the file cannot be read or is invalid.
    #[cfg(not(target_family = "wasm"))]
    pub fn load(path: &std::path::Path) -> Result<Self, CodecError> {
        let bytes = std::fs::read(path).map_err(|e| {
            CodecError::BadCalibration(format!("cannot read {}: {e}", path.display()))
        })?;
        Self::from_bytes(&bytes)
    }
}
