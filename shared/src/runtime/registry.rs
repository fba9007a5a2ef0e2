//! The models one process hosts, by the id frames carry.

use std::sync::Arc;

use super::{ModelSpec, RuntimeError, SplitModel};

/// Models by id, in the order they were added (the first is the default a client gets when it
/// names none).
#[derive(Clone, Default)]
pub struct Registry {
    models: Vec<Arc<dyn SplitModel>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Host `model` too.
    ///
    /// # Errors
    /// [`RuntimeError::Duplicate`] when its id or its name is taken.
    pub fn add(&mut self, model: Arc<dyn SplitModel>) -> Result<(), RuntimeError> {
        self.check_free(model.spec())?;
        self.models.push(model);
        Ok(())
    }

    /// Whether a model described by `spec` could be added: its id and its name untaken.
    ///
    /// # Errors
    /// [`RuntimeError::Duplicate`] otherwise.
    pub fn check_free(&self, spec: &ModelSpec) -> Result<(), RuntimeError> {
        if self.models.iter().any(|m| m.spec().id == spec.id || m.spec().name == spec.name) {
            return Err(RuntimeError::Duplicate { id: spec.id, name: spec.name.clone() });
        }
        Ok(())
    }

    /// The model whose frames carry `id`.
    pub fn get(&self, id: u8) -> Option<&Arc<dyn SplitModel>> {
        self.models.iter().find(|m| m.spec().id == id)
    }

    /// The model called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn SplitModel>> {
        self.models.iter().find(|m| m.spec().name == name)
    }

    /// Every model, in the order added.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Arc<dyn SplitModel>> {
        self.models.iter()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.models.iter().map(|m| &m.spec().name)).finish()
    }
}
