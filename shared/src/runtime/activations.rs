//! A batch of activations at one boundary of one model, on the host: what crosses a split and
//! what the server batches, whatever the model. The shape is checked against the model's spec
//! when the value is made; everything downstream trusts it.

use super::{ModelSpec, RuntimeError};
use crate::cache::ContentKey;

/// Activations of model `model` at boundary `boundary`: `dims[0]` items, each of the
/// boundary's shape, values in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct Activations {
    model: u8,
    boundary: u8,
    dims: Vec<usize>,
    values: Vec<f32>,
}

impl Activations {
    /// Activations at `boundary` of `spec`'s model with shape `dims` (`[n, ...]`, `n` at most
    /// the spec's batch limit).
    ///
    /// # Errors
    /// [`RuntimeError::UnknownBoundary`], [`RuntimeError::ShapeMismatch`],
    /// [`RuntimeError::LengthMismatch`] when `values` does not fill `dims`,
    /// [`RuntimeError::NonFinite`] for a NaN or an infinity.
    pub fn new(
        spec: &ModelSpec,
        boundary: u8,
        dims: &[usize],
        values: Vec<f32>,
    ) -> Result<Self, RuntimeError> {
        spec.check(boundary, dims, spec.max_batch)?;
        if values.len() != dims.iter().product::<usize>() {
            return Err(RuntimeError::LengthMismatch { dims: dims.to_vec(), values: values.len() });
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(RuntimeError::NonFinite { model: spec.name.clone() });
        }
        Ok(Self { model: spec.id, boundary, dims: dims.to_vec(), values })
    }

    /// The model's id.
    pub fn model(&self) -> u8 {
        self.model
    }

    /// The boundary's index.
    pub fn boundary(&self) -> u8 {
        self.boundary
    }

    /// The shape, batch first.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Items in the batch.
    pub fn batch(&self) -> usize {
        self.dims[0]
    }

    /// The values, C order.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The values, taken.
    pub fn into_values(self) -> Vec<f32> {
        self.values
    }

    /// One batch of several: every part from the same model and boundary, items in order.
    ///
    /// # Errors
    /// [`RuntimeError::MixedStack`] for parts of different models or boundaries (or none).
    pub fn stack(parts: Vec<Self>) -> Result<Self, RuntimeError> {
        let mut parts = parts.into_iter();
        let mut all = parts.next().ok_or(RuntimeError::MixedStack)?;
        for p in parts {
            if (p.model, p.boundary, &p.dims[1..]) != (all.model, all.boundary, &all.dims[1..]) {
                return Err(RuntimeError::MixedStack);
            }
            all.dims[0] += p.dims[0];
            all.values.extend_from_slice(&p.values);
        }
        Ok(all)
    }

    /// Each item's values, in order.
    pub fn items(&self) -> impl ExactSizeIterator<Item = &[f32]> {
        let per = self.dims[1..].iter().product::<usize>();
        self.values.chunks(per.max(1)).take(self.batch())
    }

    /// The key a result computed from these activations is cached under: model, boundary,
    /// shape and values, hashed in place.
    pub fn content_key(&self) -> ContentKey {
        ContentKey::of_tensor(
            b"activations",
            &[self.model, self.boundary],
            &self.dims,
            &self.values,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::BoundarySpec;

    fn spec() -> ModelSpec {
        let b = vec![BoundarySpec::new("input", &[2, 2]), BoundarySpec::new("scores", &[3])];
        ModelSpec::new(7, "tiny", b, 4).unwrap()
    }

    #[test]
    fn activations_are_checked_once_when_made() {
        let s = spec();
        let a = Activations::new(&s, 0, &[1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!((a.model(), a.boundary(), a.batch()), (7, 0, 1));
        let e = Activations::new(&s, 0, &[1, 2, 2], vec![1.0; 3]).unwrap_err();
        assert!(matches!(e, RuntimeError::LengthMismatch { .. }));
        let e = Activations::new(&s, 0, &[1, 2, 2], vec![1.0, f32::NAN, 0.0, 0.0]).unwrap_err();
        assert!(matches!(e, RuntimeError::NonFinite { .. }));
        let e = Activations::new(&s, 0, &[5, 2, 2], vec![0.0; 20]).unwrap_err();
        assert!(matches!(e, RuntimeError::ShapeMismatch { .. }), "{e}");
        assert!(Activations::new(&s, 1, &[1, 2, 2], vec![0.0; 4]).is_err());
    }

    #[test]
    fn stacking_keeps_the_items_in_order_and_refuses_mixtures() {
        let s = spec();
        let a = Activations::new(&s, 1, &[1, 3], vec![1.0, 2.0, 3.0]).unwrap();
        let b = Activations::new(&s, 1, &[2, 3], vec![4.0, 5.0, 6.0, 7.0, 8.0, 9.0]).unwrap();
        let ab = Activations::stack(vec![a.clone(), b]).unwrap();
        assert_eq!(ab.dims(), [3, 3]);
        let items: Vec<&[f32]> = ab.items().collect();
        assert_eq!(items, [&[1.0, 2.0, 3.0][..], &[4.0, 5.0, 6.0], &[7.0, 8.0, 9.0]]);
        let other = Activations::new(&s, 0, &[1, 2, 2], vec![0.0; 4]).unwrap();
        assert_eq!(Activations::stack(vec![a.clone(), other]), Err(RuntimeError::MixedStack));
        assert_eq!(Activations::stack(vec![]), Err(RuntimeError::MixedStack));
        assert_ne!(a.content_key(), Activations::stack(vec![a.clone(), a]).unwrap().content_key());
    }
}
