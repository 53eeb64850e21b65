//! Crewlet's event routing (`docs/queue.md`): the [`EventQueue`] contract, the topic
//! names ([`topics`]), the in-process [`MemoryBroker`] (tests and the embedded
//! default) and, with the `pulsar` feature (on by default), [`PulsarQueue`].
//!
//! This crate owns delivery semantics: durable publish, durable competing
//! subscriptions with redelivery, attempt counting and dead letters, live
//! wildcard streams, publish listeners, pause/resume and draining shutdown.
//! It does not store events (the engine registers the event-store writer as a
//! [`PublishListener`]) and it never creates Pulsar tenants or namespaces.
//!
//! With the `testsuite` feature, [`testsuite`] is the conformance suite every
//! backend passes.

mod batch;
mod error;
pub mod memory;
mod node;
mod pattern;
#[cfg(feature = "pulsar")]
pub mod pulsar;
mod queue;
#[cfg(feature = "testsuite")]
pub mod testsuite;
pub mod topics;

pub use batch::{BatchKey, BatchOptions};
pub use error::{BoxError, HandlerError, QueueError};
pub use memory::{MemoryBroker, MemoryBrokerOptions, MemoryQueue};
pub use pattern::TopicPattern;
#[cfg(feature = "pulsar")]
pub use pulsar::{PulsarOptions, PulsarQueue};
pub use queue::{
    DeadLetter, Delivery, DeliveryOptions, EventHandler, EventQueue, EventStream, FnHandler,
    PublishListener, ShutdownReport, StreamEvent, SubscribeOptions, Subscription, handler_fn,
};
