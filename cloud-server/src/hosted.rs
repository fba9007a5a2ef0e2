//! The models this server hosts, each behind workers and a queue of its own ([`Engine`]),
//! found by the model byte every frame carries. EfficientNet-Lite0 is always the first; a
//! program embedding the server adds more with [`crate::AppState::host`].

use std::sync::Arc;

use split_shared::runtime::{Registry, RuntimeError};

use crate::engine::Engine;

/// The hosted models and their engines, in the order added.
#[derive(Clone)]
pub struct HostedModels {
    registry: Registry,
    engines: Vec<Engine>,
}

impl HostedModels {
    /// One model, `first`: the default of clients that name none.
    pub fn new(first: Engine) -> Self {
        let mut hosted = Self { registry: Registry::new(), engines: Vec::new() };
        hosted.add(first).expect("the first model has nothing to collide with");
        hosted
    }

    /// Host `engine`'s model too.
    ///
    /// # Errors
    /// [`RuntimeError::Duplicate`] when its id or name is taken.
    pub fn add(&mut self, engine: Engine) -> Result<(), RuntimeError> {
        self.registry.add(Arc::clone(engine.model()))?;
        self.engines.push(engine);
        Ok(())
    }

    /// The first model's engine (EfficientNet-Lite0's).
    pub fn first(&self) -> &Engine {
        &self.engines[0]
    }

    /// The engine of the model with id `id`.
    pub fn get(&self, id: u8) -> Option<&Engine> {
        self.engines.iter().find(|e| e.model().spec().id == id)
    }

    /// Every engine, in the order added.
    pub fn engines(&self) -> impl ExactSizeIterator<Item = &Engine> {
        self.engines.iter()
    }

    /// The models, as a registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}
