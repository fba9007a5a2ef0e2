//! What a model tells the runtime about itself: its id on the wire, its name, and its named
//! boundaries with the shape of one item's activations at each.

use serde::Serialize;

use super::RuntimeError;

/// Most dimensions of one item's activations: a frame carries at most 4 with the batch.
pub const MAX_ITEM_RANK: usize = 3;

/// A place where a model can be cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BoundarySpec {
    /// Its name, as clients and reports say it (`block5`, `layer2`).
    pub name: String,
    /// One item's activations there, without the batch dimension.
    pub shape: Vec<usize>,
    /// Parameter bytes of everything from the input to here: what an edge that stops here
    /// holds, and what a memory budget is held against (0 where the model does not say).
    pub param_bytes: u64,
}

impl BoundarySpec {
    /// A boundary called `name` with activations of `shape` per item.
    pub fn new(name: impl Into<String>, shape: &[usize]) -> Self {
        Self { name: name.into(), shape: shape.to_vec(), param_bytes: 0 }
    }

    /// The same boundary, with `bytes` of parameters from the input to it.
    #[must_use]
    pub fn with_param_bytes(mut self, bytes: u64) -> Self {
        self.param_bytes = bytes;
        self
    }

    /// Values per item.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether an item holds no values (never, for a valid spec).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A model as the runtime sees it. Boundary 0 is its input and the last boundary its answer:
/// one score per class, from which a server replies with the best five.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelSpec {
    /// Its id: the model byte of every frame addressed to it.
    pub id: u8,
    /// Its name, as `/api/info` lists it and clients ask for it.
    pub name: String,
    /// Its boundaries in forward order: running from `a` to `b` applies what lies between.
    pub boundaries: Vec<BoundarySpec>,
    /// Most items one forward pass takes.
    pub max_batch: usize,
}

impl ModelSpec {
    /// A model description, checked: at least an input and an answer, names unique and
    /// non-empty, every shape non-empty of rank 1 to [`MAX_ITEM_RANK`], parameter bytes never
    /// falling along the boundaries, `max_batch` at least 1.
    ///
    /// # Errors
    /// [`RuntimeError::BadSpec`] saying which rule failed.
    pub fn new(
        id: u8,
        name: impl Into<String>,
        boundaries: Vec<BoundarySpec>,
        max_batch: usize,
    ) -> Result<Self, RuntimeError> {
        let name = name.into();
        let bad = |why: String| Err(RuntimeError::BadSpec(format!("{name}: {why}")));
        if name.is_empty() {
            return bad("an empty name".into());
        }
        if !(2..=usize::from(u8::MAX) + 1).contains(&boundaries.len()) {
            return bad(format!("{} boundaries; 2 to 256 are allowed", boundaries.len()));
        }
        if max_batch == 0 {
            return bad("a batch limit of 0".into());
        }
        for (i, b) in boundaries.iter().enumerate() {
            if b.name.is_empty() || boundaries[..i].iter().any(|o| o.name == b.name) {
                return bad(format!("boundary {i}'s name {:?} is empty or repeated", b.name));
            }
            if !(1..=MAX_ITEM_RANK).contains(&b.shape.len()) || b.is_empty() {
                return bad(format!("boundary {}'s shape {:?}", b.name, b.shape));
            }
            if i > 0 && b.param_bytes < boundaries[i - 1].param_bytes {
                return bad(format!("boundary {}'s parameter bytes fall", b.name));
            }
        }
        Ok(Self { id, name, boundaries, max_batch })
    }

    /// The boundary at `index`.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownBoundary`] past the last.
    pub fn boundary(&self, index: u8) -> Result<&BoundarySpec, RuntimeError> {
        self.boundaries.get(usize::from(index)).ok_or_else(|| RuntimeError::UnknownBoundary {
            model: self.name.clone(),
            index,
            count: self.boundaries.len(),
        })
    }

    /// The index of the boundary called `name`.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownBoundaryName`].
    pub fn index_of(&self, name: &str) -> Result<u8, RuntimeError> {
        self.boundaries.iter().position(|b| b.name == name).map(|i| i as u8).ok_or_else(|| {
            RuntimeError::UnknownBoundaryName { model: self.name.clone(), name: name.into() }
        })
    }

    /// The last boundary: the scores the model answers with.
    pub fn output(&self) -> u8 {
        (self.boundaries.len() - 1) as u8
    }

    /// Check that `dims` is a batch of `1..=max_batch` items at `boundary`.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownBoundary`], [`RuntimeError::ShapeMismatch`].
    pub fn check(
        &self,
        boundary: u8,
        dims: &[usize],
        max_batch: usize,
    ) -> Result<(), RuntimeError> {
        let b = self.boundary(boundary)?;
        match dims.split_first() {
            Some((n, item)) if (1..=max_batch).contains(n) && item == b.shape.as_slice() => Ok(()),
            _ => Err(RuntimeError::ShapeMismatch {
                model: self.name.clone(),
                boundary: b.name.clone(),
                expected: b.shape.clone(),
                got: dims.to_vec(),
                max_batch,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ModelSpec {
        let b = vec![BoundarySpec::new("input", &[4]), BoundarySpec::new("scores", &[3])];
        ModelSpec::new(9, "tiny", b, 2).unwrap()
    }

    #[test]
    fn a_spec_names_its_boundaries_and_checks_shapes() {
        let s = spec();
        assert_eq!((s.output(), s.index_of("scores").unwrap()), (1, 1));
        assert!(s.check(0, &[2, 4], s.max_batch).is_ok());
        assert!(matches!(s.check(0, &[3, 4], 2), Err(RuntimeError::ShapeMismatch { .. })));
        assert!(matches!(s.check(0, &[1, 3], 2), Err(RuntimeError::ShapeMismatch { .. })));
        assert!(matches!(s.check(0, &[4], 2), Err(RuntimeError::ShapeMismatch { .. })));
        let e = s.check(2, &[1, 3], 2).unwrap_err();
        assert_eq!(e.to_string(), "tiny has no boundary 2: it has 2 (0..2)");
        assert!(s.index_of("logits").is_err());
    }

    #[test]
    fn a_spec_that_cannot_be_served_is_refused() {
        let one = vec![BoundarySpec::new("input", &[4])];
        assert!(ModelSpec::new(1, "m", one, 1).is_err());
        let twice = vec![BoundarySpec::new("x", &[4]), BoundarySpec::new("x", &[2])];
        assert!(ModelSpec::new(1, "m", twice, 1).is_err());
        let deep = vec![BoundarySpec::new("a", &[1, 2, 3, 4]), BoundarySpec::new("b", &[2])];
        assert!(ModelSpec::new(1, "m", deep, 1).is_err());
        let empty = vec![BoundarySpec::new("a", &[0]), BoundarySpec::new("b", &[2])];
        assert!(ModelSpec::new(1, "m", empty, 1).is_err());
        let falling = vec![
            BoundarySpec::new("a", &[1]).with_param_bytes(8),
            BoundarySpec::new("b", &[2]).with_param_bytes(4),
        ];
        assert!(ModelSpec::new(1, "m", falling, 1).is_err());
        let ok = vec![BoundarySpec::new("a", &[1]), BoundarySpec::new("b", &[2])];
        assert!(ModelSpec::new(1, "m", ok.clone(), 0).is_err());
        assert!(ModelSpec::new(1, "", ok, 1).is_err());
    }
}
