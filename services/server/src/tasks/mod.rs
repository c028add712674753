//! What runs beside serving, each task until the stop token fires (they
//! are started by [`crate::startup::background`]): [`health`] (SERVING
//! only while the database answers), [`backlog`] (the backlog gauges),
//! [`alerts`] (review thresholds), [`webhooks`] (the sender of webhook
//! consumers; both POST through [`outbound`]), [`purger`] (deleted ledgers),
//! [`maintenance`] (vacuuming the runnable queue), [`every`] (their pace);
//! and the one LISTEN hub, [`wakeup`], that watch streams follow with
//! [`tail`].

pub mod alerts;
pub mod backlog;
pub mod every;
pub mod health;
pub mod maintenance;
pub mod outbound;
pub mod purger;
pub mod tail;
pub mod wakeup;
pub mod webhooks;
